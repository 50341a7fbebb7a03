"""Cost of one publish call in the engine's thread (not a test; run it by hand).

    PYTHONPATH=python python3 python/tests/bench_publish.py
"""

from __future__ import annotations

import time

import kvrouter


def main() -> None:
    pub = kvrouter.KvEventPublisher(16, endpoint="tcp://127.0.0.1:0", replay_endpoint="tcp://127.0.0.1:0")
    try:
        for blocks in (1, 8, 64):
            tokens = list(range(16 * blocks))
            n = 20000 // blocks
            ids = [[i * 1000 + j + 1 for j in range(blocks)] for i in range(n)]
            t = time.perf_counter()
            for h in ids:
                pub.publish_stored(tokens, 16, h)
            stored = (time.perf_counter() - t) / n
            t = time.perf_counter()
            for h in ids:
                pub.publish_removed(h)
            removed = (time.perf_counter() - t) / n
            print(f"{blocks:3d} blocks ({16 * blocks:5d} tokens): publish_stored {stored * 1e6:7.1f} µs, "
                  f"publish_removed {removed * 1e6:7.1f} µs")
        print(pub.stats())
    finally:
        pub.shutdown()


if __name__ == "__main__":
    main()
