"""Event ids, misuse, the local view, replay and the send queue."""

from __future__ import annotations

import threading
import warnings

import msgpack
import pytest
import zmq

import kvrouter
from conftest import poll, recv, replay, subscribe

T16 = list(range(16))
T32 = list(range(32))


def seqs(replies):
    return [int.from_bytes(f[2], "big") for f in replies[:-1]]


def test_event_ids_are_monotonic_from_zero(publisher, ctx):
    pub = publisher()
    assert pub.next_event_id == 0
    ids = [pub.publish_stored(T32, [16, 16], [1, 2]), pub.publish_stored(T16, [16], [3], parent_hash=2),
           pub.publish_removed([3]), pub.publish_cleared(), pub.publish_stored(T16, 16, [4])]
    assert ids == [0, 1, 2, 3, 4]
    # a refused call consumes no id
    with pytest.raises(ValueError):
        pub.publish_stored(T16, [8], [5])
    assert pub.publish_removed([4]) == 5
    assert seqs(replay(ctx, pub.replay_endpoint, 0)) == [0, 1, 2, 3, 4, 5]
    assert pub.stats().events_published == 6


@pytest.mark.parametrize("call, exc, message", [
    (lambda p: p.publish_stored(T32, [16], [1, 2]), ValueError, "2 block hashes but 1 entries"),
    (lambda p: p.publish_stored(T32, [16, 8], [1, 2]), ValueError, r"num_block_tokens\[1\] is 8, but kv_block_size is 16"),
    (lambda p: p.publish_stored(T16, [16, 16], [1, 2]), ValueError, "16 token ids for 2 blocks of 16 tokens: expected 32"),
    (lambda p: p.publish_stored(T16, [16], []), ValueError, "block_hashes is empty"),
    (lambda p: p.publish_stored(T16, [16], [1.0]), TypeError, r"block_hashes\[0\] must be an int .* not float"),
    (lambda p: p.publish_stored(T16, [16], ["0xab"]), TypeError, "not str"),
    (lambda p: p.publish_stored(T16, [16], [True]), TypeError, "not bool"),
    (lambda p: p.publish_stored(T16, [16], 7), TypeError, "block_hashes must be a list of ints"),
    (lambda p: p.publish_stored(T16, [16], [2**64]), ValueError, "outside the signed and unsigned 64-bit ranges"),
    (lambda p: p.publish_stored(T16, [16], [-(2**63) - 1]), ValueError, "outside"),
    (lambda p: p.publish_stored(T16, [16], [1], parent_hash="x"), TypeError, "parent_hash must be an int"),
    (lambda p: p.publish_stored(T32, [16, 16], [1, 1]), ValueError, "block hash 1 appears twice"),
    (lambda p: p.publish_stored(T16, [16], [1], parent_hash=1), ValueError, "its own parent"),
    (lambda p: p.publish_stored([0.5] * 16, [16], [1]), TypeError, r"token_ids\[0\] must be an int"),
    (lambda p: p.publish_stored([-1] * 16, [16], [1]), ValueError, "not a token id"),
    (lambda p: p.publish_stored(T16, [16], [1], lora_id=-1), ValueError, "lora_id -1 is negative"),
    (lambda p: p.publish_stored(T16, [16], [1], medium=3), TypeError, "medium must be"),
    (lambda p: p.publish_removed([]), ValueError, "block_hashes is empty"),
    (lambda p: p.publish_removed([None]), TypeError, "must be an int"),
])
def test_misuse_is_refused_clearly(publisher, call, exc, message):
    pub = publisher()
    with pytest.raises(exc, match=message):
        call(pub)
    assert pub.next_event_id == 0 and pub.held_blocks() == frozenset()


def test_constructor_misuse():
    with pytest.raises(ValueError, match="kv_block_size"):
        kvrouter.KvEventPublisher(0, endpoint="tcp://127.0.0.1:0")
    with pytest.raises(ValueError, match="buffer_events"):
        kvrouter.KvEventPublisher(16, endpoint="tcp://127.0.0.1:0", buffer_events=0)
    with pytest.raises(ValueError, match="needs a numeric, non-zero port"):
        kvrouter.KvEventPublisher(16, endpoint="tcp://127.0.0.1:0", dp_rank=1)


def test_port_in_use_names_the_endpoint(publisher):
    a = publisher()
    with pytest.raises(OSError, match="binding endpoint " + a.endpoint):
        kvrouter.KvEventPublisher(16, endpoint=a.endpoint, replay_endpoint=None)


def test_unknown_parent_warns_and_says_what_the_router_does(publisher):
    pub = publisher()
    with pytest.warns(kvrouter.UnknownParentWarning, match="the router refuses a stored event whose parent"):
        eid = pub.publish_stored(T16, [16], [10], parent_hash=99)
    assert eid == 0 and pub.holds(10)  # still published: it is what the engine holds
    # a parent held on another medium is known (the router looks on every tier)
    pub.publish_stored(T16, [16], [20], medium="CPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pub.publish_stored(T16, [16], [2**64 - 5], parent_hash=20)
        pub.publish_stored(T16, [16], [22], parent_hash=-5)  # the same block, spelt signed


def test_local_view_counts_like_the_router(publisher):
    pub = publisher()
    pub.publish_stored(T32, [16, 16], [1, 2])
    pub.publish_stored(T16, [16], [2], parent_hash=1)  # a second copy of block 2 (vLLM does this)
    pub.publish_stored(T16, [16], [1], medium="CPU")  # block 1 also offloaded
    assert pub.held_blocks() == {1, 2}
    assert pub.held_blocks("CPU") == {1} and pub.held_blocks("gpu") == {1, 2}
    pub.publish_removed([2])
    assert pub.holds(2), "one copy of block 2 is left"
    pub.publish_removed([2])
    assert not pub.holds(2)
    pub.publish_removed([1])
    assert not pub.holds(1, "GPU") and pub.holds(1, "CPU") and pub.holds(1)
    assert pub.stats().held_blocks == 1
    pub.publish_stored(T16, [16], [7])
    pub.publish_cleared()
    assert pub.held_blocks() == frozenset() and pub.stats().held_blocks == 0


def test_replay_is_bounded_and_starts_where_asked(publisher, ctx):
    pub = publisher(buffer_events=3)
    for i in range(5):
        pub.publish_stored(T16, [16], [100 + i])
    assert seqs(replay(ctx, pub.replay_endpoint, 0)) == [2, 3, 4]  # the oldest are gone
    assert seqs(replay(ctx, pub.replay_endpoint, 3)) == [3, 4]
    assert seqs(replay(ctx, pub.replay_endpoint, 9)) == []  # END alone
    # a 1-byte start sequence is read as an unsigned big-endian int too
    assert seqs(replay(ctx, pub.replay_endpoint, 0, start_bytes=b"\x04")) == [4]
    # payloads are the batches themselves
    last = replay(ctx, pub.replay_endpoint, 4)[0][3]
    assert msgpack.unpackb(last)[1][0]["block_hashes"] == [104]
    st = pub.stats()
    assert (st.replay_requests, st.replayed_batches) == (5, 3 + 2 + 0 + 1 + 1)


def test_invalid_replay_requests_are_ignored(publisher, ctx):
    pub = publisher()
    pub.publish_cleared()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(pub.replay_endpoint)
    d.send_multipart([b"x", b"\x00" * 8])  # not an empty delimiter
    d.send_multipart([b"", b"\x00" * 9])  # not a sequence
    d.send_multipart([b""])
    poll("invalid requests counted", lambda: pub.stats().replay_invalid == 3)
    assert not d.poll(0)
    d.close()
    assert seqs(replay(ctx, pub.replay_endpoint, 0)) == [0]  # still serving


def test_a_batch_kept_off_the_live_stream_is_replayed(publisher, ctx):
    pub = publisher()
    sub = subscribe(ctx, pub)
    a = pub.publish_stored(T16, [16], [1])
    pub._skip_live = 1  # test seam: as if the send queue were full
    b = pub.publish_stored(T16, [16], [2], parent_hash=1)
    c = pub.publish_stored(T16, [16], [3], parent_hash=2)
    got = [int.from_bytes(recv(sub)[1], "big") for _ in range(2)]
    assert got == [a, c], "b skipped the live stream"
    assert pub.stats().live_dropped == 1
    assert seqs(replay(ctx, pub.replay_endpoint, b))[:1] == [b]
    sub.close()


def test_full_send_queue_drops_instead_of_blocking(publisher, ctx):
    pub = publisher(max_queue_size=2)
    sub = subscribe(ctx, pub)
    # Stall the socket thread at its next wake-up so the queue fills.
    entered, release = threading.Event(), threading.Event()
    flush = pub._flush

    def stalled():
        entered.set()
        release.wait(10)
        flush()

    pub._flush = stalled
    first = pub.publish_stored(T16, [16], [1])
    assert entered.wait(5)
    with pub._lock:
        queued = len(pub._outbox)  # 1, or 0 if the thread sent `first` just before stalling
    room = 2 - queued
    ids = [pub.publish_stored(T16, [16], [2 + i]) for i in range(room + 1)]  # each returns at once
    assert pub.stats().live_dropped == 1, "the queue was full for the last one"
    pub._flush = flush
    release.set()
    got = [int.from_bytes(recv(sub)[1], "big") for _ in range(1 + room)]
    assert got == [first] + ids[:room]
    after = pub.publish_cleared()  # the live stream goes on after the drop
    assert int.from_bytes(recv(sub)[1], "big") == after
    assert seqs(replay(ctx, pub.replay_endpoint, ids[room])) == [ids[room], after]
    sub.close()


def test_shutdown_is_final_and_idempotent(publisher):
    pub = publisher()
    with pub:
        pub.publish_cleared()
    pub.shutdown()
    with pytest.raises(kvrouter.PublisherClosedError):
        pub.publish_cleared()
    # the ports are free again: a restarted engine binds them and starts at 0
    again = publisher(endpoint=pub.endpoint, replay_endpoint=pub.replay_endpoint)
    assert again.next_event_id == 0


def test_publishing_from_many_threads_keeps_ids_dense(publisher, ctx):
    pub = publisher()
    ids: list[int] = []
    lock = threading.Lock()

    def worker(k):
        for i in range(50):
            eid = pub.publish_stored(T16, [16], [k * 1000 + i])
            with lock:
                ids.append(eid)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(ids) == list(range(200))
    assert seqs(replay(ctx, pub.replay_endpoint, 0)) == list(range(200))
    assert len(pub.held_blocks()) == 200
