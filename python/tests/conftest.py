"""Shared helpers: golden samples, a subscriber that is surely subscribed, replay requests."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Callable

import pytest
import zmq

import kvrouter

REPO = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = REPO / "internal" / "kvevent" / "vllm" / "testdata" / "samples.jsonl"


def load_samples(variant_prefix: str) -> list[dict]:
    """The Go decoder's golden payloads (one msgpack batch per line) of one variant family."""
    out = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    out = [s for s in out if s["variant"].startswith(variant_prefix)]
    assert out, f"no golden samples for {variant_prefix}"
    return out


def poll(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until cond() holds (a positive signal), failing after timeout."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture
def ctx() -> zmq.Context:
    return zmq.Context.instance()


def loopback_publisher(**kw) -> kvrouter.KvEventPublisher:
    kw.setdefault("endpoint", "tcp://127.0.0.1:0")
    kw.setdefault("replay_endpoint", "tcp://127.0.0.1:0")
    return kvrouter.KvEventPublisher(kw.pop("kv_block_size", 16), **kw)


@pytest.fixture
def publisher():
    """Factory of loopback publishers on free ports, shut down after the test."""
    made = []

    def make(**kw) -> kvrouter.KvEventPublisher:
        p = loopback_publisher(**kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.shutdown()


def recv(sock: zmq.Socket, timeout_ms: int = 5000) -> list[bytes]:
    if not sock.poll(timeout_ms):
        pytest.fail("no message within %d ms" % timeout_ms)
    return sock.recv_multipart()


def subscribe(ctx: zmq.Context, pub: kvrouter.KvEventPublisher, topic: bytes = b"") -> zmq.Socket:
    """A SUB socket the publisher surely delivers to.

    PUB drops what it sends before the subscription arrives, so this
    publishes clears until one is received, then drains: the next event id
    is the first the caller publishes.
    """
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(pub.endpoint)
    deadline = time.monotonic() + 10
    while not sub.poll(20):
        if time.monotonic() > deadline:
            pytest.fail("subscription never took effect")
        pub.publish_cleared()
    last = pub.next_event_id - 1
    while True:
        frames = recv(sub)
        if int.from_bytes(frames[1], "big") == last:
            return sub


def replay(ctx: zmq.Context, endpoint: str, start: int, start_bytes: bytes | None = None) -> list[list[bytes]]:
    """Every reply to one DEALER replay request, END marker included."""
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(endpoint)
    d.send_multipart([b"", start.to_bytes(8, "big") if start_bytes is None else start_bytes])
    out = []
    try:
        while True:
            frames = recv(d)
            out.append(frames)
            if len(frames) >= 3 and frames[-2] == b"\xff" * 8:
                return out
    finally:
        d.close()
