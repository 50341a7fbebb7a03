"""The publisher's local view of the blocks the engine holds.

It follows the published events the way the router's index does: a stored
block counts once per store on its medium, a removal takes one count away,
a clear empties everything. The publisher uses it to warn about a parent
the router cannot know; the engine can read it back. Not thread-safe: the
publisher guards it with its lock.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Optional


class LocalView:
    """Reference counts of held blocks per (medium, block hash)."""

    __slots__ = ("_counts", "_mediums")

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, int]] = Counter()
        # how many mediums hold each hash, for the any-medium questions
        self._mediums: Counter[int] = Counter()

    def store(self, medium: str, hashes: Iterable[int]) -> None:
        """Count one store of every hash on medium."""
        for h in hashes:
            key = (medium, h)
            if self._counts[key] == 0:
                self._mediums[h] += 1
            self._counts[key] += 1

    def remove(self, medium: str, hashes: Iterable[int]) -> list[int]:
        """Take one count of every hash on medium; returns the hashes not held there."""
        unknown = []
        for h in hashes:
            key = (medium, h)
            n = self._counts.get(key, 0)
            if n == 0:
                unknown.append(h)
            elif n == 1:
                del self._counts[key]
                self._mediums[h] -= 1
                if self._mediums[h] == 0:
                    del self._mediums[h]
            else:
                self._counts[key] = n - 1
        return unknown

    def clear(self) -> None:
        """Forget every block."""
        self._counts.clear()
        self._mediums.clear()

    def holds(self, block_hash: int, medium: Optional[str] = None) -> bool:
        """Whether block_hash is held on medium (any medium when None)."""
        if medium is None:
            return block_hash in self._mediums
        return (medium, block_hash) in self._counts

    def held(self, medium: Optional[str] = None) -> frozenset[int]:
        """The hashes held on medium (any medium when None)."""
        if medium is None:
            return frozenset(self._mediums)
        return frozenset(h for (m, h) in self._counts if m == medium)

    def __len__(self) -> int:
        """Distinct block hashes held on any medium."""
        return len(self._mediums)
