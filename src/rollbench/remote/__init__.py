"""Talking to policy servers: wire frames of the openpi and vla-eval dialects, key mapping.

The client is `rollbench.policies.remote` (`--policy.type=remote`); the server is
`rollbench.serve` (`rollbench serve`). See docs/remote.md.
"""

from rollbench.remote.keys import KeyMap, parse_keys
from rollbench.remote.wire import DIALECTS, Dialect, Envelope, MessageType, ProtocolError, packb, unpackb

__all__ = ["DIALECTS", "Dialect", "Envelope", "KeyMap", "MessageType", "ProtocolError", "packb", "parse_keys", "unpackb"]
