"""vLLM's KV event wire format: the frames and the msgpack payload.

A live message is three ZMQ frames: the topic (UTF-8, may be empty), the
sequence number as 8 bytes big-endian, and one msgpack batch
``[ts, events, data_parallel_rank]``. Current vLLM writes every event as a
tagged map: ``"type"`` first, then the fields in declaration order; fields
without a default are always present (``None`` as nil), fields with a
default are left out while they hold it. This module builds exactly those
maps and nothing else; it does no I/O.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import msgpack

#: Sequence frame of the replay END marker: -1 as 8 signed big-endian bytes.
END_SEQ = b"\xff" * 8

#: vLLM's medium for the GPU (device) tier.
MEDIUM_GPU = "GPU"

#: The attention kind vLLM names for an ordinary model's one KV cache group.
FULL_ATTENTION = "full_attention"

Event = dict[str, Any]


def seq_frame(seq: int) -> bytes:
    """The 8-byte big-endian frame of sequence number ``seq``."""
    return seq.to_bytes(8, "big")


def block_stored(
    block_hashes: Sequence[int],
    parent_block_hash: Optional[int],
    token_ids: Sequence[int],
    block_size: int,
    lora_id: Optional[int],
    medium: Optional[str],
    lora_name: Optional[str],
    extra_keys: Optional[Sequence[Any]] = None,
    group_idx: Optional[int] = None,
    kv_cache_spec_kind: Optional[str] = None,
    kv_cache_spec_sliding_window: Optional[int] = None,
) -> Event:
    """A ``BlockStored`` event as vLLM's msgspec writes it (tagged map).

    The first seven fields have no default in vLLM and are always written;
    the last four are omitted while ``None``.
    """
    ev: Event = {
        "type": "BlockStored",
        "block_hashes": list(block_hashes),
        "parent_block_hash": parent_block_hash,
        "token_ids": list(token_ids),
        "block_size": block_size,
        "lora_id": lora_id,
        "medium": medium,
        "lora_name": lora_name,
    }
    if extra_keys is not None:
        ev["extra_keys"] = list(extra_keys)
    if group_idx is not None:
        ev["group_idx"] = group_idx
    if kv_cache_spec_kind is not None:
        ev["kv_cache_spec_kind"] = kv_cache_spec_kind
    if kv_cache_spec_sliding_window is not None:
        ev["kv_cache_spec_sliding_window"] = kv_cache_spec_sliding_window
    return ev


def block_removed(
    block_hashes: Sequence[int], medium: Optional[str], group_idx: Optional[int] = None
) -> Event:
    """A ``BlockRemoved`` event (tagged map); ``group_idx`` is omitted while ``None``."""
    ev: Event = {"type": "BlockRemoved", "block_hashes": list(block_hashes), "medium": medium}
    if group_idx is not None:
        ev["group_idx"] = group_idx
    return ev


def all_blocks_cleared() -> Event:
    """An ``AllBlocksCleared`` event: the tag alone."""
    return {"type": "AllBlocksCleared"}


def encode_batch(ts: float, events: Sequence[Event], dp_rank: Optional[int]) -> bytes:
    """The msgpack payload of one batch: ``[ts, events, data_parallel_rank]``.

    ``ts`` is always a float64, ints take their smallest form, strings are
    msgpack str and bytes are bin, as msgspec writes them.
    """
    return msgpack.packb([float(ts), list(events), dp_rank], use_bin_type=True)


def live_frames(topic: bytes, seq: int, payload: bytes) -> list[bytes]:
    """The three frames of a live message."""
    return [topic, seq_frame(seq), payload]


def replay_frames(identity: bytes, topic: bytes, seq: int, payload: bytes) -> list[bytes]:
    """One replay reply as the ROUTER sends it (current vLLM: with the topic).

    The DEALER receives ``["", topic, seq, payload]``.
    """
    return [identity, b"", topic, seq_frame(seq), payload]


def replay_end_frames(identity: bytes) -> list[bytes]:
    """The END marker after a replay: the DEALER receives ``["", "", FF×8, ""]``."""
    return [identity, b"", b"", END_SEQ, b""]


def parse_replay_request(frames: Sequence[bytes]) -> Optional[int]:
    """The start sequence of a replay request ``[identity, "", start_seq]``.

    ``start_seq`` is an unsigned big-endian integer of 1 to 8 bytes (8 by
    convention). Anything else is not a replay request: ``None``.
    """
    if len(frames) != 3 or len(frames[1]) != 0 or not 1 <= len(frames[2]) <= 8:
        return None
    return int.from_bytes(frames[2], "big")
