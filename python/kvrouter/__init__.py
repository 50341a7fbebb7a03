"""kvrouter's Python side: publish a custom engine's KV cache events.

A Python engine creates one :class:`KvEventPublisher` per data-parallel rank
and calls ``publish_stored`` / ``publish_removed`` / ``publish_cleared`` as
its block cache changes. The events go out on vLLM's ZMQ wire format, so
``kvrouter serve --worker 'events=...,replay=...'`` and ``kvrouter agent``
consume them exactly as they consume vLLM. See docs/python.md.
"""

from ._publisher import (
    KvEventPublisher,
    KvEventWarning,
    PublisherClosedError,
    PublisherStats,
    UnknownBlockWarning,
    UnknownParentWarning,
    offset_endpoint,
)

__all__ = [
    "KvEventPublisher",
    "KvEventWarning",
    "PublisherClosedError",
    "PublisherStats",
    "UnknownBlockWarning",
    "UnknownParentWarning",
    "offset_endpoint",
]

__version__ = "0.1.0"
