"""The token side channel: provider deltas to live subscribers, never through workflow history.

See ``turngate.streaming.base`` for the contract and docs/STREAMING.md for the picture.
"""

from turngate.streaming.base import (
    DEFAULT_TTL_S,
    NullBus,
    StreamEvent,
    StreamPosition,
    TokenBus,
    TokenPublisher,
    TokenSubscriber,
)
from turngate.streaming.factory import TokenBusUrlError, open_token_bus

__all__ = [
    "DEFAULT_TTL_S",
    "NullBus",
    "StreamEvent",
    "StreamPosition",
    "TokenBus",
    "TokenBusUrlError",
    "TokenPublisher",
    "TokenSubscriber",
    "open_token_bus",
]
