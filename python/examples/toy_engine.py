#!/usr/bin/env python3
"""A toy "engine" that publishes real KV events to kvrouter.

It serves no model. It draws prompts that share a few system prefixes,
caches their full blocks in an LRU block cache of fixed capacity, and
publishes what a real engine would: BlockStored for the blocks it fills,
BlockRemoved for the ones it evicts. It answers GET /health so kvrouter's
health probe is happy, and with --router it asks the router's /v1/query
how much of each prompt the router thinks it holds.

Run it next to kvrouter (two terminals):

    python3 python/examples/toy_engine.py --http-port 8001 --router http://127.0.0.1:8000
    kvrouter serve --worker 'name=toy,url=http://127.0.0.1:8001,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558'

With --check it exits 0 once the router's overlap for every prompt family
equals the engine's own cache, 1 if that does not happen in time.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import random
import sys
import threading
import time
import urllib.request
from collections import OrderedDict

from kvrouter import KvEventPublisher


def block_hash(parent: int | None, tokens: list[int]) -> int:
    """The engine's id of a block: a 64-bit digest of its parent and tokens."""
    h = hashlib.blake2b(digest_size=8)
    h.update((parent or 0).to_bytes(8, "little"))
    for t in tokens:
        h.update(t.to_bytes(4, "little"))
    return int.from_bytes(h.digest(), "little")


class LRUBlockCache:
    """Full blocks by hash, least recently used first; evicts to stay within capacity."""

    def __init__(self, pub: KvEventPublisher, capacity: int):
        self.pub, self.capacity, self.bs = pub, capacity, pub.kv_block_size
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def admit(self, tokens: list[int]) -> tuple[int, int, int]:
        """Caches the prompt's full blocks; returns blocks (hit, stored, evicted)."""
        n = len(tokens) // self.bs
        hashes, parent = [], None
        for i in range(n):
            parent = block_hash(parent, tokens[i * self.bs:(i + 1) * self.bs])
            hashes.append(parent)
        # The cache is prefix-closed (a block's parent is always cached too),
        # so the first miss ends the hits.
        hit = 0
        while hit < n and hashes[hit] in self.blocks:
            hit += 1
        new = hashes[hit:]
        victims = []
        if new:
            # Make room, never evicting this prompt's own blocks.
            keep = set(hashes)
            for h in self.blocks:
                if len(self.blocks) - len(victims) + len(new) <= self.capacity:
                    break
                if h not in keep:
                    victims.append(h)
            if victims:
                for h in victims:
                    del self.blocks[h]
                self.pub.publish_removed(victims)
            new = new[: max(0, self.capacity - len(self.blocks))]  # a prompt longer than the cache
        if new:
            for h in new:
                self.blocks[h] = None
            self.pub.publish_stored(
                token_ids=tokens[hit * self.bs:(hit + len(new)) * self.bs],
                num_block_tokens=[self.bs] * len(new),
                block_hashes=new,
                parent_hash=hashes[hit - 1] if hit else None,
            )
        # Touch the prompt's blocks deepest first: a parent is then always
        # more recently used than its children, so LRU evicts leaves first
        # and the cache stays prefix-closed.
        for h in reversed(hashes[: hit + len(new)]):
            self.blocks.move_to_end(h)
        return hit, len(new), len(victims)

    def leading_held(self, tokens: list[int]) -> int:
        parent, n = None, 0
        for i in range(len(tokens) // self.bs):
            parent = block_hash(parent, tokens[i * self.bs:(i + 1) * self.bs])
            if parent not in self.blocks:
                break
            n += 1
        return n


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b'{"status":"ok"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def router_overlap(router: str, worker: str, tokens: list[int]) -> int | None:
    req = urllib.request.Request(router.rstrip("/") + "/v1/query", json.dumps({"tokens": tokens}).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            rows = json.load(r)["workers"]
    except OSError:
        return None
    return next((w["overlap_blocks"] for w in rows if w["worker"] == worker), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--capacity", type=int, default=48, help="blocks the cache holds")
    ap.add_argument("--events", default="tcp://*:5557", help="PUB endpoint to bind")
    ap.add_argument("--replay", default="tcp://*:5558", help="replay ROUTER endpoint to bind")
    ap.add_argument("--http-port", type=int, default=8001, help="port of GET /health (0: none)")
    ap.add_argument("--requests", type=int, default=0, help="prompts to admit (0: forever)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between prompts")
    ap.add_argument("--router", help="kvrouter base URL, to print its /v1/query overlap")
    ap.add_argument("--worker", default="toy", help="this engine's name in --worker name=...")
    ap.add_argument("--check", action="store_true", help="with --router: exit 0 once the router agrees")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    bs = args.block_size
    systems = [[rng.randrange(1, 150_000) for _ in range(4 * bs)] for _ in range(3)]
    if args.http_port:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.http_port), Health)
        threading.Thread(target=srv.serve_forever, daemon=True).start()

    with KvEventPublisher(bs, endpoint=args.events, replay_endpoint=args.replay) as pub:
        print(f"toy engine: events {pub.endpoint}, replay {pub.replay_endpoint}, block size {bs}, "
              f"{args.capacity} blocks", flush=True)
        cache = LRUBlockCache(pub, args.capacity)
        families: dict[int, list[int]] = {}
        i = 0
        while args.requests == 0 or i < args.requests:
            fam = rng.randrange(len(systems))
            prompt = systems[fam] + [rng.randrange(1, 150_000) for _ in range(rng.randrange(1, 4) * bs)]
            hit, stored, evicted = cache.admit(prompt)
            families[fam] = prompt
            line = f"prompt {i}: {len(prompt) // bs} blocks, {hit} cached, {stored} stored, {evicted} evicted, {len(cache.blocks)} held"
            if args.router:
                time.sleep(0.05)
                line += f"; router overlap {router_overlap(args.router, args.worker, prompt)}"
            print(line, flush=True)
            i += 1
            time.sleep(args.interval)
        if not (args.router and args.check):
            return 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = {f: router_overlap(args.router, args.worker, p) for f, p in families.items()}
            want = {f: cache.leading_held(p) for f, p in families.items()}
            if got == want:
                print(f"router agrees: {want}", flush=True)
                return 0
            time.sleep(0.2)
        print(f"router disagrees: got {got}, want {want}; {pub.stats()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
