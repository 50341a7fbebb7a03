"""KvEventPublisher: a custom engine's KV events on vLLM's ZMQ wire format."""

from __future__ import annotations

import itertools
import logging
import operator
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

import zmq

from . import _wire
from ._view import LocalView

log = logging.getLogger("kvrouter")

_U64 = 1 << 64
_I64_MIN = -(1 << 63)
_U32 = 1 << 32

# Test seam: the batch timestamp (seconds since the epoch, as vLLM's time.time()).
_now = time.time

_wake_ids = itertools.count()


class PublisherClosedError(RuntimeError):
    """A publish call after shutdown()."""


class KvEventWarning(UserWarning):
    """Base class of the warnings about events the router will not use as sent."""


class UnknownParentWarning(KvEventWarning):
    """A stored event names a parent this publisher does not hold."""


class UnknownBlockWarning(KvEventWarning):
    """A removal names a block this publisher does not hold."""


@dataclass(frozen=True)
class PublisherStats:
    """Counters of one publisher since it started."""

    #: Batches published (each publish_* call is one batch and one event id).
    events_published: int
    #: Batches kept out of the live stream because the send queue was full;
    #: they stay in the replay buffer, so a subscriber recovers them by replay.
    live_dropped: int
    #: Replay requests answered: counted just before the END marker goes out, so a
    #: requester that has read END sees its request here (one whose END cannot be
    #: sent moves to replay_aborted).
    replay_requests: int
    #: Batches sent in replay replies.
    replayed_batches: int
    #: Messages on the replay socket that were not replay requests.
    replay_invalid: int
    #: Replays abandoned because the requester was gone or its queue full.
    replay_aborted: int
    #: Distinct block hashes the local view holds (any medium).
    held_blocks: int


def offset_endpoint(endpoint: str, dp_rank: int) -> str:
    """The endpoint of data-parallel rank ``dp_rank``, as vLLM computes it.

    Rank 0 keeps the endpoint; a tcp endpoint gets its port plus the rank; an
    inproc endpoint the suffix ``_dp<rank>``; anything else is an error.
    """
    if dp_rank == 0:
        return endpoint
    if endpoint.startswith("tcp://"):
        i = endpoint.rfind(":")
        port = endpoint[i + 1 :]
        if i < len("tcp://") or not port.isdigit() or int(port) == 0:
            raise ValueError(
                f"endpoint {endpoint!r}: dp_rank {dp_rank} needs a numeric, non-zero port to offset"
            )
        if int(port) + dp_rank > 65535:
            raise ValueError(f"endpoint {endpoint!r}: port + dp_rank {dp_rank} exceeds 65535")
        return f"{endpoint[: i + 1]}{int(port) + dp_rank}"
    if endpoint.startswith("inproc://"):
        return f"{endpoint}_dp{dp_rank}"
    raise ValueError(f"endpoint {endpoint!r}: only tcp and inproc endpoints can be offset per dp_rank")


def _dialable(sock: zmq.Socket) -> str:
    """The bound endpoint as a local subscriber can dial it."""
    ep = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    for wildcard, local in (("tcp://0.0.0.0:", "tcp://127.0.0.1:"), ("tcp://[::]:", "tcp://[::1]:")):
        if ep.startswith(wildcard):
            return local + ep[len(wildcard) :]
    return ep


def _block_hash(value: Any, what: str) -> int:
    """A block hash as the unsigned 64-bit int vLLM publishes.

    Signed values (Dynamo's Python API, SGLang) become their two's-complement
    bit pattern, which is the same block to the router.
    """
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int (a 64-bit block hash), not {type(value).__name__}")
    v = operator.index(value)
    if _I64_MIN <= v < 0:
        return v + _U64
    if not 0 <= v < _U64:
        raise ValueError(f"{what} {v} is outside the signed and unsigned 64-bit ranges")
    return v


def _all_ints(values: Any) -> bool:
    return isinstance(values, (list, tuple)) and all(type(v) is int for v in values)


def _block_hashes(values: Any, what: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of ints, not {type(values).__name__}")
    if _all_ints(values) and (not values or (min(values) >= _I64_MIN and max(values) < _U64)):
        return [v + _U64 if v < 0 else v for v in values]  # the common case, fast
    return [_block_hash(v, f"{what}[{i}]") for i, v in enumerate(values)]


def _token_ids(values: Any) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"token_ids must be a list of ints, not {type(values).__name__}")
    if _all_ints(values) and (not values or (min(values) >= 0 and max(values) < _U32)):
        return list(values)  # the common case, fast
    out = []
    for i, t in enumerate(values):
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            raise TypeError(f"token_ids[{i}] must be an int, not {type(t).__name__}")
        t = operator.index(t)
        if not 0 <= t < _U32:
            raise ValueError(f"token_ids[{i}] {t} is not a token id (0 ≤ id < 2^32)")
        out.append(t)
    return out


def _medium(medium: Any) -> str:
    if medium is None:
        return _wire.MEDIUM_GPU
    if not isinstance(medium, str) or not medium:
        raise TypeError(f"medium must be a non-empty str or None (GPU), not {medium!r}")
    return medium


def _nonneg_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    v = operator.index(value)
    if v < 0:
        raise ValueError(f"{what} {v} is negative")
    return v


class KvEventPublisher:
    """Publishes an engine's KV cache events as vLLM does, for kvrouter.

    Shaped like Dynamo's ``KvEventPublisher`` binding: the engine calls
    :meth:`publish_stored` when blocks become full and cached,
    :meth:`publish_removed` when it evicts them and :meth:`publish_cleared`
    when it drops its whole cache. Each call is one batch with the next
    event id (0, 1, 2, ...), which is the batch's sequence number on the
    wire.

    It binds a PUB socket on ``endpoint`` (vLLM's live stream) and, unless
    ``replay_endpoint`` is None, a ROUTER socket that replays the last
    ``buffer_events`` batches to a subscriber that missed some. Both
    endpoints are offset by ``dp_rank`` as vLLM does (tcp port + rank), so
    ``kvrouter serve --worker 'events=...,replay=...,dp-size=N'`` finds every
    rank. Port 0 (or ``*``) binds a free port; read it back from
    :attr:`endpoint` and :attr:`replay_endpoint`.

    Publish calls may come from any thread. They validate, encode and queue
    the batch and return: the sockets belong to one background thread. When
    the queue is full the batch skips the live stream (counted in
    :meth:`stats` as ``live_dropped``) but stays in the replay buffer, so the
    router fills the gap by replay.
    """

    def __init__(
        self,
        kv_block_size: int,
        *,
        endpoint: str = "tcp://*:5557",
        replay_endpoint: Optional[str] = "tcp://*:5558",
        dp_rank: int = 0,
        topic: str = "",
        buffer_events: int = 10_000,
        hwm: int = 100_000,
        max_queue_size: int = 100_000,
        linger_ms: int = 200,
    ) -> None:
        if isinstance(kv_block_size, bool) or not isinstance(kv_block_size, int) or kv_block_size <= 0:
            raise ValueError(f"kv_block_size must be a positive int, not {kv_block_size!r}")
        dp_rank = _nonneg_int(dp_rank, "dp_rank")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        for name, v, low in (("buffer_events", buffer_events, 1), ("hwm", hwm, 0),
                             ("max_queue_size", max_queue_size, 1), ("linger_ms", linger_ms, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an int ≥ {low}, not {v!r}")
        if not isinstance(endpoint, str) or not endpoint:
            raise ValueError("endpoint is required (e.g. tcp://*:5557)")
        if replay_endpoint is not None and (not isinstance(replay_endpoint, str) or not replay_endpoint):
            raise ValueError("replay_endpoint must be an endpoint (e.g. tcp://*:5558) or None")

        self._block_size = kv_block_size
        self._dp_rank = dp_rank
        self._topic = topic
        self._topic_b = topic.encode("utf-8")
        self._buffer_events = buffer_events
        self._max_queue = max_queue_size

        self._lock = threading.Lock()
        self._closed = False
        self._seq = 0
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_events)
        self._outbox: deque[tuple[int, bytes]] = deque()
        self._view = LocalView()
        self._skip_live = 0  # test seam: the next N batches skip the live stream
        self._dropped = 0
        self._replay_requests = 0
        self._replayed = 0
        self._replay_invalid = 0
        self._replay_aborted = 0
        self._stopping = False

        # A context of its own: terminating it in shutdown() waits until the
        # sockets are really closed, so a restarted engine can bind the same
        # ports at once.
        ctx = zmq.Context()
        self._ctx = ctx
        socks: list[zmq.Socket] = []
        try:
            ep = offset_endpoint(endpoint, dp_rank)
            self._pub = ctx.socket(zmq.PUB)
            socks.append(self._pub)
            self._pub.setsockopt(zmq.SNDHWM, hwm)
            self._pub.setsockopt(zmq.LINGER, linger_ms)
            self._bind(self._pub, ep, "endpoint")
            self._router: Optional[zmq.Socket] = None
            if replay_endpoint is not None:
                rep = offset_endpoint(replay_endpoint, dp_rank)
                self._router = ctx.socket(zmq.ROUTER)
                socks.append(self._router)
                # A whole buffer fits in one requester's queue; past it (or
                # for a requester gone) a send fails instead of dropping.
                self._router.setsockopt(zmq.SNDHWM, buffer_events + 2)
                self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)
                self._router.setsockopt(zmq.LINGER, 0)
                self._bind(self._router, rep, "replay_endpoint")
            wake = f"inproc://kvrouter-publisher-wake-{next(_wake_ids)}"
            self._wake_rx = ctx.socket(zmq.PAIR)
            socks.append(self._wake_rx)
            self._wake_rx.setsockopt(zmq.LINGER, 0)
            self._wake_rx.bind(wake)
            self._wake_tx = ctx.socket(zmq.PAIR)
            socks.append(self._wake_tx)
            self._wake_tx.setsockopt(zmq.LINGER, 0)
            self._wake_tx.setsockopt(zmq.SNDHWM, 1)
            self._wake_tx.connect(wake)
        except BaseException:
            for s in socks:
                s.close(linger=0)
            ctx.term()
            raise
        self._endpoint = _dialable(self._pub)
        self._replay_ep = _dialable(self._router) if self._router is not None else None
        self._thread = threading.Thread(target=self._run, name="kvrouter-publisher", daemon=True)
        self._thread.start()
        log.info("KV event publisher bound: events %s, replay %s, dp_rank %d, block size %d",
                 self._endpoint, self._replay_ep, dp_rank, kv_block_size)

    @staticmethod
    def _bind(sock: zmq.Socket, endpoint: str, what: str) -> None:
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            raise OSError(e.errno, f"binding {what} {endpoint}: {e.strerror}") from e

    # ---- properties -------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The bound live endpoint, as a local subscriber dials it (wildcards → loopback)."""
        return self._endpoint

    @property
    def replay_endpoint(self) -> Optional[str]:
        """The bound replay endpoint, or None without replay."""
        return self._replay_ep

    @property
    def kv_block_size(self) -> int:
        """Tokens per block."""
        return self._block_size

    @property
    def dp_rank(self) -> int:
        """The data-parallel rank written into every batch."""
        return self._dp_rank

    @property
    def topic(self) -> str:
        """The topic frame of every message."""
        return self._topic

    @property
    def next_event_id(self) -> int:
        """The event id (sequence number) the next publish call gets."""
        with self._lock:
            return self._seq

    # ---- publishing -------------------------------------------------------

    def publish_stored(
        self,
        token_ids: Sequence[int],
        num_block_tokens: Union[Sequence[int], int],
        block_hashes: Sequence[int],
        lora_id: int = 0,
        parent_hash: Optional[int] = None,
        medium: Optional[str] = None,
        *,
        lora_name: Optional[str] = None,
    ) -> int:
        """Publish that blocks became full and cached; returns the event id.

        ``block_hashes`` are the engine's ids for the new blocks, in sequence
        order (signed or unsigned 64-bit ints); ``token_ids`` their tokens,
        ``num_block_tokens[i]`` tokens for block i (each must be
        ``kv_block_size``; an int means that many for every block).
        ``parent_hash`` is the engine id of the block just before the first
        one, None when the first block starts the sequence. ``lora_id`` 0
        means the base model; ``lora_name`` is the adapter name requests are
        routed with (vLLM's field; the router hashes it into the blocks).
        ``medium`` None is the GPU.
        """
        hashes = _block_hashes(block_hashes, "block_hashes")
        toks = _token_ids(token_ids)
        n = len(hashes)
        if n == 0:
            raise ValueError("block_hashes is empty: a stored event needs at least one block")
        bs = self._block_size
        if isinstance(num_block_tokens, int) and not isinstance(num_block_tokens, bool):
            counts = [num_block_tokens] * n
        else:
            if isinstance(num_block_tokens, (str, bytes)) or not isinstance(num_block_tokens, Iterable):
                raise TypeError(f"num_block_tokens must be a list of ints, not {type(num_block_tokens).__name__}")
            counts = [_nonneg_int(c, f"num_block_tokens[{i}]") for i, c in enumerate(num_block_tokens)]
        if len(counts) != n:
            raise ValueError(f"{n} block hashes but {len(counts)} entries in num_block_tokens: one per block")
        for i, c in enumerate(counts):
            if c != bs:
                raise ValueError(
                    f"num_block_tokens[{i}] is {c}, but kv_block_size is {bs}: the router only indexes "
                    f"full blocks of {bs} tokens (publish a block once it is full)"
                )
        if len(toks) != n * bs:
            raise ValueError(f"{len(toks)} token ids for {n} blocks of {bs} tokens: expected {n * bs}")
        if len(set(hashes)) != n:
            dup = next(h for i, h in enumerate(hashes) if h in hashes[:i])
            raise ValueError(f"block hash {dup} appears twice in block_hashes")
        parent = None if parent_hash is None else _block_hash(parent_hash, "parent_hash")
        if parent is not None and parent in hashes:
            raise ValueError(f"block hash {parent} is its own parent")
        lora = _nonneg_int(lora_id, "lora_id")
        if lora_name is not None and (not isinstance(lora_name, str) or not lora_name):
            raise TypeError(f"lora_name must be a non-empty str or None, not {lora_name!r}")
        med = _medium(medium)
        ev = _wire.block_stored(
            hashes, parent, toks, bs, lora if lora else None, med, lora_name,
            extra_keys=[None] * n, group_idx=0, kv_cache_spec_kind=_wire.FULL_ATTENTION,
        )
        with self._lock:
            orphan = parent is not None and not self._view.holds(parent)
            seq = self._publish_locked(ev)
            self._view.store(med.upper(), hashes)
        if orphan:
            warnings.warn(
                UnknownParentWarning(
                    f"event {seq}: parent_hash {parent} was never stored through this publisher (or was "
                    f"removed): the router refuses a stored event whose parent it does not hold, so these "
                    f"{n} blocks will not be routed to; publish the parent first, or pass parent_hash=None "
                    f"when the first block starts the sequence"
                ),
                stacklevel=2,
            )
        return seq

    def publish_removed(self, block_hashes: Sequence[int], medium: Optional[str] = None) -> int:
        """Publish that blocks were evicted; returns the event id."""
        hashes = _block_hashes(block_hashes, "block_hashes")
        if not hashes:
            raise ValueError("block_hashes is empty: a removed event needs at least one block")
        med = _medium(medium)
        ev = _wire.block_removed(hashes, med, group_idx=0)
        with self._lock:
            seq = self._publish_locked(ev)
            unknown = self._view.remove(med.upper(), hashes)
        if unknown:
            warnings.warn(
                UnknownBlockWarning(
                    f"event {seq}: {len(unknown)} removed block(s) not held on {med} by this publisher "
                    f"(first {unknown[0]}): the router ignores removals of blocks it does not hold"
                ),
                stacklevel=2,
            )
        return seq

    def publish_cleared(self) -> int:
        """Publish that the engine dropped every cached block; returns the event id."""
        with self._lock:
            seq = self._publish_locked(_wire.all_blocks_cleared())
            self._view.clear()
        return seq

    def _publish_locked(self, event: _wire.Event) -> int:
        if self._closed:
            raise PublisherClosedError("KvEventPublisher is shut down")
        seq = self._seq
        payload = _wire.encode_batch(_now(), [event], self._dp_rank)
        self._seq += 1
        self._buffer.append((seq, payload))
        if self._skip_live > 0:
            self._skip_live -= 1
            self._dropped += 1
        elif len(self._outbox) >= self._max_queue:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                log.warning("KV event send queue full (%d batches): batch %d skips the live stream "
                            "(replay can still serve it); %d dropped so far", self._max_queue, seq, self._dropped)
        else:
            self._outbox.append((seq, payload))
            try:
                self._wake_tx.send(b"", zmq.NOBLOCK)
            except zmq.Again:
                pass  # a wake-up is already pending
        return seq

    # ---- local view and counters -----------------------------------------

    def holds(self, block_hash: int, medium: Optional[str] = None) -> bool:
        """Whether the published events leave block_hash held (on medium, or any)."""
        h = _block_hash(block_hash, "block_hash")
        with self._lock:
            return self._view.holds(h, None if medium is None else _medium(medium).upper())

    def held_blocks(self, medium: Optional[str] = None) -> frozenset[int]:
        """The block hashes (unsigned) the published events leave held (on medium, or any)."""
        with self._lock:
            return self._view.held(None if medium is None else _medium(medium).upper())

    def stats(self) -> PublisherStats:
        """A snapshot of the counters."""
        with self._lock:
            return PublisherStats(
                events_published=self._seq, live_dropped=self._dropped,
                replay_requests=self._replay_requests, replayed_batches=self._replayed,
                replay_invalid=self._replay_invalid, replay_aborted=self._replay_aborted,
                held_blocks=len(self._view),
            )

    # ---- lifecycle ---------------------------------------------------------

    def shutdown(self, timeout: float = 1.0) -> None:
        """Send what is queued, then close the sockets. Idempotent.

        Queued batches get ``linger_ms`` to leave; later publish calls raise
        :class:`PublisherClosedError`.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stopping = True
            try:
                self._wake_tx.send(b"", zmq.NOBLOCK)
            except zmq.Again:
                pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("KV event publisher thread did not stop within %.1f s", timeout)
            return
        self._wake_tx.close(linger=0)
        self._ctx.term()  # returns once the sockets are closed and the ports free

    def __enter__(self) -> "KvEventPublisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (f"KvEventPublisher(kv_block_size={self._block_size}, endpoint={self._endpoint!r}, "
                f"replay_endpoint={self._replay_ep!r}, dp_rank={self._dp_rank}, topic={self._topic!r})")

    # ---- the socket thread -------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._wake_rx, zmq.POLLIN)
        if self._router is not None:
            poller.register(self._router, zmq.POLLIN)
        try:
            while True:
                try:
                    ready = dict(poller.poll())
                    if self._wake_rx in ready:
                        while True:
                            try:
                                self._wake_rx.recv(zmq.NOBLOCK)
                            except zmq.Again:
                                break
                    self._flush()
                    if self._router is not None and self._router in ready:
                        self._serve_replays()
                    with self._lock:
                        stopping = self._stopping
                    if stopping:
                        self._flush()
                        return
                except zmq.ContextTerminated:
                    return
                except Exception:  # never let the socket thread die silently
                    log.exception("KV event publisher thread error")
                    time.sleep(0.01)
        finally:
            self._pub.close()
            if self._router is not None:
                self._router.close(linger=0)
            self._wake_rx.close(linger=0)

    def _flush(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    return
                seq, payload = self._outbox.popleft()
            try:
                self._pub.send_multipart(_wire.live_frames(self._topic_b, seq, payload), zmq.NOBLOCK)
            except zmq.Again:
                with self._lock:
                    self._dropped += 1

    def _serve_replays(self) -> None:
        assert self._router is not None
        while True:
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            start = _wire.parse_replay_request(frames)
            if start is None:
                with self._lock:
                    self._replay_invalid += 1
                log.warning("invalid KV event replay request (%d frames)", len(frames))
                continue
            ident = frames[0]
            with self._lock:
                batches = [b for b in self._buffer if b[0] >= start]
            sent = 0
            try:
                for seq, payload in batches:
                    self._router.send_multipart(_wire.replay_frames(ident, self._topic_b, seq, payload), zmq.NOBLOCK)
                    sent += 1
            except zmq.ZMQError as e:  # the requester is gone (EHOSTUNREACH) or its queue is full
                self._replay_abandoned(start, sent, e, counted=False)
                continue
            # Counted before the END frame goes out, so a requester that has
            # read END finds its request in stats().
            with self._lock:
                self._replay_requests += 1
                self._replayed += sent
            try:
                self._router.send_multipart(_wire.replay_end_frames(ident), zmq.NOBLOCK)
            except zmq.ZMQError as e:
                self._replay_abandoned(start, sent, e, counted=True)

    def _replay_abandoned(self, start: int, sent: int, err: zmq.ZMQError, counted: bool) -> None:
        """Counts a replay whose requester went away after sent batches (counted: already as answered)."""
        log.info("KV event replay from %d abandoned after %d batches: %s", start, sent, err)
        with self._lock:
            self._replay_aborted += 1
            if counted:
                self._replay_requests -= 1
            else:
                self._replayed += sent
