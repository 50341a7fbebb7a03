"""The encoding against the Go decoder's golden payloads, and the frames."""

from __future__ import annotations

import socket

import msgpack
import pytest

import kvrouter
from kvrouter import _publisher, _wire
from conftest import load_samples, recv, replay, subscribe


def publish_decoded(pub: kvrouter.KvEventPublisher, event: dict) -> int:
    """Replays one golden event (its JSON rendering) through the public API."""
    if event["type"] == "BlockStored":
        assert event["lora_id"] is None and event["lora_name"] is None
        return pub.publish_stored(
            token_ids=event["token_ids"],
            num_block_tokens=[event["block_size"]] * len(event["block_hashes"]),
            block_hashes=event["block_hashes"],
            parent_hash=event["parent_block_hash"],
            medium=event["medium"],
        )
    if event["type"] == "BlockRemoved":
        return pub.publish_removed(event["block_hashes"], medium=event["medium"])
    assert event["type"] == "AllBlocksCleared"
    return pub.publish_cleared()


def test_golden_payloads_byte_for_byte(publisher, ctx, monkeypatch):
    # The current-vLLM samples (tagged maps, integer hashes): three chained
    # stores and a removal, each published through the API at the sample's
    # timestamp, must come back from replay with the sample's seq and bytes.
    samples = load_samples("map/spec_kind/int")
    pub = publisher()
    for s in samples:
        ts, events, rank = s["decoded"]
        assert rank == pub.dp_rank and len(events) == 1
        monkeypatch.setattr(_publisher, "_now", lambda ts=ts: ts)
        assert publish_decoded(pub, events[0]) == s["seq"]
    replies = replay(ctx, pub.replay_endpoint, 0)
    assert len(replies) == len(samples) + 1
    for s, frames in zip(samples, replies):
        assert frames == [b"", b"", s["seq"].to_bytes(8, "big"), bytes.fromhex(s["payload_hex"])], s["seq"]
    assert replies[-1] == [b"", b"", b"\xff" * 8, b""]


def test_golden_decoded_matches_encoder():
    # The module-level encoder reproduces every current-vLLM sample from its
    # fields (both integer and 32-byte hashes: bytes pack as msgpack bin).
    for variant in ("map/spec_kind/int", "map/spec_kind/bytes"):
        for s in load_samples(variant):
            ts, events, rank = s["decoded"]
            built = []
            for e in events:
                def h(x):
                    return bytes.fromhex(x[4:]) if isinstance(x, str) and x.startswith("hex:") else x
                if e["type"] == "BlockStored":
                    built.append(_wire.block_stored(
                        [h(x) for x in e["block_hashes"]], h(e["parent_block_hash"]), e["token_ids"],
                        e["block_size"], e["lora_id"], e["medium"], e["lora_name"], e.get("extra_keys"),
                        e.get("group_idx"), e.get("kv_cache_spec_kind"), e.get("kv_cache_spec_sliding_window")))
                else:
                    built.append(_wire.block_removed([h(x) for x in e["block_hashes"]], e["medium"], e.get("group_idx")))
            assert _wire.encode_batch(ts, built, rank) == bytes.fromhex(s["payload_hex"]), (variant, s["seq"])


def test_signed_hashes_publish_as_unsigned(publisher, ctx, monkeypatch):
    # SGLang's sample carries the signed hash -5402312323117846107; vLLM
    # publishes unsigned ints. The signed and the unsigned spelling of one
    # hash are one block: identical payloads, unsigned on the wire.
    (s,) = load_samples("sglang/array/signed")
    signed = s["decoded"][1][0][1][0]
    assert signed < 0
    unsigned = signed + 2**64
    monkeypatch.setattr(_publisher, "_now", lambda: 1.5)
    pub = publisher()
    toks = list(range(2000, 2016))
    pub.publish_stored(toks, [16], [signed])
    pub.publish_stored(toks, [16], [unsigned])
    a, b = (f[3] for f in replay(ctx, pub.replay_endpoint, 0)[:2])
    assert a == b
    assert msgpack.unpackb(a)[1][0]["block_hashes"] == [13044431750591705509]
    assert pub.held_blocks() == {13044431750591705509}
    assert pub.holds(signed) and pub.holds(unsigned)


def test_live_frames_and_topic(publisher, ctx):
    pub = publisher(topic="kv-events", dp_rank=0)
    sub = subscribe(ctx, pub, b"kv-events")
    first = pub.next_event_id
    eid = pub.publish_stored(list(range(32)), [16, 16], [11, 12])
    assert eid == first
    topic, seq, payload = recv(sub)
    assert topic == b"kv-events" and seq == eid.to_bytes(8, "big")
    ts, events, rank = msgpack.unpackb(payload)
    assert isinstance(ts, float) and rank == 0
    assert events == [{
        "type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None,
        "token_ids": list(range(32)), "block_size": 16, "lora_id": None, "medium": "GPU",
        "lora_name": None, "extra_keys": [None, None], "group_idx": 0, "kv_cache_spec_kind": "full_attention",
    }]
    # replay replies carry the topic too (current vLLM), with the same payload
    assert replay(ctx, pub.replay_endpoint, eid)[0] == [b"", b"kv-events", seq, payload]
    with pytest.warns(kvrouter.UnknownBlockWarning, match="not held on CPU"):
        pub.publish_removed([12], medium="CPU")  # stored on the GPU only
    assert msgpack.unpackb(recv(sub)[2])[1] == [
        {"type": "BlockRemoved", "block_hashes": [12], "medium": "CPU", "group_idx": 0}]
    pub.publish_cleared()
    assert msgpack.unpackb(recv(sub)[2])[1] == [{"type": "AllBlocksCleared"}]
    sub.close()


def test_lora_fields(publisher, ctx):
    pub = publisher()
    pub.publish_stored(list(range(16)), 16, [5], lora_id=3, lora_name="sql-adapter")
    ev = msgpack.unpackb(replay(ctx, pub.replay_endpoint, 0)[0][3])[1][0]
    assert ev["lora_id"] == 3 and ev["lora_name"] == "sql-adapter"


def test_dp_rank_in_batches_and_endpoints(publisher, ctx):
    assert kvrouter.offset_endpoint("tcp://*:5557", 0) == "tcp://*:5557"
    assert kvrouter.offset_endpoint("tcp://*:5557", 3) == "tcp://*:5560"
    assert kvrouter.offset_endpoint("inproc://kv", 2) == "inproc://kv_dp2"
    for bad in ("tcp://*:0", "tcp://*:x", "ipc:///tmp/kv", "tcp://*:65535"):
        with pytest.raises(ValueError):
            kvrouter.offset_endpoint(bad, 1)
    # rank 2 binds base + 2: take two free ports and name the bases below
    # them (retrying if another process takes one in between)
    for attempt in range(20):
        free = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                free.append(s.getsockname()[1])
        try:
            pub = publisher(dp_rank=2, endpoint=f"tcp://127.0.0.1:{free[0] - 2}",
                            replay_endpoint=f"tcp://127.0.0.1:{free[1] - 2}")
            break
        except OSError:
            continue
    else:
        pytest.fail("no free ports")
    assert (pub.endpoint, pub.replay_endpoint) == tuple(f"tcp://127.0.0.1:{p}" for p in free)
    pub.publish_cleared()
    assert msgpack.unpackb(replay(ctx, pub.replay_endpoint, 0)[0][3])[2] == 2
