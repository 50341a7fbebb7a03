"""End to end: the real `kvrouter serve` indexes what the Python publisher publishes.

The publisher is a static worker (`--worker name=py,url=...,events=...,replay=...`);
its URL is a tiny HTTP stub answering the router's health probes. The test
publishes stores and removals, keeps one batch off the live stream (the
router must fetch it by replay), restarts the publisher, and checks
`/v1/query` block for block against what was published.
"""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import re
import shutil
import sys
import subprocess
import threading
import time
import urllib.request

import pytest

import kvrouter
from conftest import REPO

BS = 16
IN_CI = os.environ.get("CI", "").lower() == "true"


def find_go() -> str | None:
    for cand in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and (shutil.which(cand) or os.access(cand, os.X_OK)):
            return cand
    return None


@pytest.fixture(scope="module")
def kvrouter_bin(tmp_path_factory) -> str:
    """KVROUTER_BIN, or a fresh `go build` of ./cmd/kvrouter into a temp dir."""
    if os.environ.get("KVROUTER_BIN"):
        return os.environ["KVROUTER_BIN"]
    go = find_go()
    if go is None:
        if IN_CI:
            pytest.fail("no Go toolchain to build kvrouter (set GO or KVROUTER_BIN)")
        pytest.skip("no Go toolchain to build kvrouter (set GO or KVROUTER_BIN to run this test)")
    out = tmp_path_factory.mktemp("bin") / "kvrouter"
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run([go, "build", "-o", str(out), "./cmd/kvrouter"], cwd=REPO, env=env, check=True)
    return str(out)


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_stub():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


class Serve:
    """A running `kvrouter serve`, its log collected from stderr."""

    def __init__(self, binary: str, data_dir: pathlib.Path, worker: str):
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", "0", "--nats-port", "-1", "--data-dir", str(data_dir),
             "--worker", worker],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base = "http://" + self._wait_log(r'msg="kvrouter serving" addr=(\S+)')

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def _wait_log(self, pattern: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.log):
                m = re.search(pattern, line)
                if m:
                    return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        pytest.fail(f"kvrouter serve never logged {pattern!r}:\n" + "".join(self.log))

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.base + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=5) as r:
            return json.load(r)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)


class Chain:
    """A token sequence of whole blocks and the engine's hash of each block."""

    def __init__(self, tokens: list[int], hashes: list[int]):
        assert len(tokens) == BS * len(hashes)
        self.tokens, self.hashes = tokens, hashes

    def block(self, i: int) -> list[int]:
        return self.tokens[i * BS:(i + 1) * BS]


def leading_held(chain: Chain, held: frozenset[int]) -> int:
    """The expected overlap: consecutive leading blocks whose hash is held."""
    n = 0
    for h in chain.hashes:
        if h % 2**64 not in held:
            break
        n += 1
    return n


def overlaps(serve: Serve, chains: dict[str, Chain]) -> dict[tuple[str, int], int]:
    """/v1/query's overlap of the py worker for every prefix of every chain."""
    out = {}
    for name, c in chains.items():
        for k in range(1, len(c.hashes) + 1):
            resp = serve.post("/v1/query", {"tokens": c.tokens[:k * BS]})
            assert resp["block_size"] == BS and resp["blocks"] == k
            rows = [w for w in resp["workers"] if w["worker"] == "py"]
            assert len(rows) == 1, resp
            out[(name, k)] = rows[0]["overlap_blocks"]
    return out


def expected(chains: dict[str, Chain], held: frozenset[int]) -> dict[tuple[str, int], int]:
    return {(name, k): min(k, leading_held(c, held))
            for name, c in chains.items() for k in range(1, len(c.hashes) + 1)}


_scratch = iter(range(1, 1000))


def nudge(pub: kvrouter.KvEventPublisher) -> None:
    """Store a scratch block and take it back.

    PUB drops what it sends before a (re)connecting subscriber's
    subscription lands, and the router learns of a loss only from a later
    batch, as with any engine; a real engine keeps publishing, a test nudges.
    """
    i = next(_scratch)
    tokens = list(range(100_000 + i * BS, 100_000 + (i + 1) * BS))
    pub.publish_stored(tokens, [BS], [900_000 + i])
    pub.publish_removed([900_000 + i])


def wait_overlaps(serve: Serve, chains, pub, what: str, timeout: float = 20):
    want = expected(chains, pub.held_blocks())
    deadline = time.monotonic() + timeout
    next_nudge = time.monotonic() + 1
    while True:
        got = overlaps(serve, chains)
        if got == want:
            return
        if time.monotonic() > deadline:
            diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
            pytest.fail(f"{what}: /v1/query overlap (got, want) differs at {diff}\n" + "".join(serve.log[-30:]))
        if time.monotonic() > next_nudge:
            nudge(pub)
            next_nudge = time.monotonic() + 1
        time.sleep(0.05)


def test_serve_indexes_the_python_publisher(kvrouter_bin, health_stub, tmp_path):
    pub = kvrouter.KvEventPublisher(BS, endpoint="tcp://127.0.0.1:0", replay_endpoint="tcp://127.0.0.1:0")
    serve = None
    try:
        worker = f"name=py,url={health_stub},events={pub.endpoint},replay={pub.replay_endpoint},block-size={BS}"
        serve = Serve(kvrouter_bin, tmp_path / "data", worker)

        a = Chain(list(range(1000, 1000 + 6 * BS)), [2**63 + 11 * i + 1 for i in range(6)])
        b_tail = list(range(5000, 5000 + 4 * BS))
        b = Chain(a.tokens[:2 * BS] + b_tail, a.hashes[:2] + [7000 + i for i in range(4)])
        c = Chain(list(range(9000, 9000 + 3 * BS)), [-(i + 1) * 12345 for i in range(3)])  # signed hashes
        # o's second block is published below a parent that never was: the
        # publisher warns, the router refuses it, so o has no overlap at all
        o = Chain(list(range(12000, 12000 + 2 * BS)), [4242, 4343])
        chains = {"a": a, "b": b, "c": c, "o": o}

        pub.publish_stored(a.tokens[:4 * BS], [BS] * 4, a.hashes[:4])
        pub.publish_stored(a.tokens[4 * BS:], [BS] * 2, a.hashes[4:], parent_hash=a.hashes[3])
        pub._skip_live = 1  # test seam: this batch reaches the router only through replay
        dropped = pub.publish_stored(b_tail, [BS] * 4, b.hashes[2:], parent_hash=b.hashes[1])
        pub.publish_removed([a.hashes[4]])
        with pytest.warns(kvrouter.UnknownParentWarning):
            pub.publish_stored(o.block(1), [BS], o.hashes[1:], parent_hash=o.hashes[0])
        pub.publish_stored(c.tokens, BS, c.hashes)
        pub.publish_removed([b.hashes[3]])
        assert pub.stats().live_dropped == 1
        wait_overlaps(serve, chains, pub, "after stores, removals and a replayed batch")
        # b's third block was only ever in the replay buffer
        assert expected(chains, pub.held_blocks())[("b", 3)] == 3
        assert pub.holds(o.hashes[1]) and expected(chains, pub.held_blocks())[("o", 2)] == 0
        # ... not even as a root block (the later batches converged, so it was seen)
        alone = serve.post("/v1/query", {"tokens": o.block(1)})
        assert [w["overlap_blocks"] for w in alone["workers"] if w["worker"] == "py"] == [0]
        assert pub.stats().replayed_batches >= 1

        workers = {w["worker"]: w for w in serve.get("/v1/workers")["workers"]}
        assert workers["py"]["state"] == "EXACT", workers["py"]
        assert workers["py"]["last_sequence"] == pub.next_event_id - 1 > dropped

        # An engine restart: the new publisher starts again at event id 0 with
        # an empty buffer. The router must drop the old blocks and index the
        # new ones.
        endpoint, replay_endpoint = pub.endpoint, pub.replay_endpoint
        pub.shutdown()
        pub = kvrouter.KvEventPublisher(BS, endpoint=endpoint, replay_endpoint=replay_endpoint)
        d = Chain(list(range(20000, 20000 + 2 * BS)), [31, 32])
        chains["d"] = d
        assert pub.publish_stored(d.tokens, [BS, BS], d.hashes) == 0
        wait_overlaps(serve, chains, pub, "after the publisher restarted")

        pub.publish_cleared()
        assert pub.held_blocks() == frozenset()
        wait_overlaps(serve, chains, pub, "after AllBlocksCleared")
    finally:
        pub.shutdown()
        if serve is not None:
            serve.stop()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_toy_engine_example_agrees_with_the_router(kvrouter_bin, tmp_path):
    # The example as documented: kvrouter serve with the toy engine as a
    # static worker; the engine exits 0 once /v1/query agrees with its cache.
    for attempt in range(3):  # the chosen free ports can be taken in between
        events, replay_ep, health = free_port(), free_port(), free_port()
        worker = (f"name=toy,url=http://127.0.0.1:{health},events=tcp://127.0.0.1:{events},"
                  f"replay=tcp://127.0.0.1:{replay_ep}")
        serve = Serve(kvrouter_bin, tmp_path / f"data{attempt}", worker)
        try:
            env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
            r = subprocess.run(
                [sys.executable, str(REPO / "python" / "examples" / "toy_engine.py"),
                 "--events", f"tcp://127.0.0.1:{events}", "--replay", f"tcp://127.0.0.1:{replay_ep}",
                 "--http-port", str(health), "--router", serve.base, "--requests", "40", "--interval", "0.01",
                 "--capacity", "24", "--check"],
                env=env, capture_output=True, text=True, timeout=60)
        finally:
            serve.stop()
        if r.returncode != 0 and "Address already in use" in r.stderr:
            continue
        break
    assert r.returncode == 0, r.stdout + r.stderr
    assert "router agrees" in r.stdout
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("prompt ")]
    assert len(lines) == 40
    # misses, shared-prefix hits and evictions all happened
    assert any(" 0 cached" in ln for ln in lines) and any(" 4 cached" in ln for ln in lines)
    assert any(re.search(r" [1-9]\d* evicted", ln) for ln in lines), r.stdout
