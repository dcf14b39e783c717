"""Frames on the wire: msgpack with numpy arrays, in the two dialects rollbench speaks.

openpi (openpi's `WebsocketPolicyServer` / `WebsocketClientPolicy`): the server sends one
msgpack map of metadata on connect; a request is a bare msgpack map of observations (plus
`prompt`), a reply a map whose `actions` is a chunk; an error is a *text* frame. Arrays are
maps `{b"__ndarray__": True, b"data": raw bytes, b"dtype": "<f4", b"shape": [...]}` (bytes
keys) and numpy scalars `{b"__npgeneric__": True, b"data": value, b"dtype": "<f4"}`.

vla-eval (its `Connection` / model servers): every frame is an envelope
`{"type", "payload", "seq", "timestamp"}`; the client sends `hello` first and the server
answers `hello`; then `episode_start`, `observation` (answered by `action` with the same
`seq`), `episode_end`, and `error` frames. Arrays are the same maps with *str* keys, and
HWC uint8 images may come as `{"__image__": True, "format": "png"|"jpeg"|"raw", ...}`.

The decoder accepts every one of these forms; only bool, integer and float dtypes are
accepted (an object array would be a way to run code), and an array's bytes must match
its shape.
"""

from __future__ import annotations

import enum
import io
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rollbench.errors import RollbenchError

Dialect = Literal["openpi", "vla-eval"]
DIALECTS: tuple[str, ...] = ("openpi", "vla-eval")
ALLOWED_KINDS = frozenset("biuf")
PROTOCOL_VERSION = 1  # vla-eval's envelope version


class ProtocolError(RollbenchError):
    """A frame could not be decoded, or is not what the protocol allows at this point."""


class MessageType(str, enum.Enum):
    HELLO = "hello"
    OBSERVATION = "observation"
    ACTION = "action"
    EPISODE_START = "episode_start"
    EPISODE_END = "episode_end"
    ERROR = "error"


@dataclass
class Envelope:
    """One vla-eval frame."""

    type: MessageType
    payload: dict[str, Any]
    seq: int = 0
    timestamp: float = field(default_factory=time.time)


# -- encoding -------------------------------------------------------------------------


def _check_dtype(dtype: np.dtype[Any]) -> None:
    if dtype.kind not in ALLOWED_KINDS:
        raise ProtocolError(f"arrays of dtype {dtype} cannot be sent; only bool, integer and float arrays")


def _default_openpi(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype)
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype)
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _default_vla_eval(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype)
        return {"__ndarray__": True, "data": np.ascontiguousarray(obj).tobytes(), "dtype": obj.dtype.str, "shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__}")


def packb(obj: Any, dialect: Dialect = "openpi") -> bytes:
    """msgpack bytes of `obj`, arrays encoded the way `dialect`'s peers decode them."""
    import msgpack  # optional: msgpack (the remote extra)

    default = _default_openpi if dialect == "openpi" else _default_vla_eval
    try:
        return msgpack.packb(obj, default=default, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as err:
        raise ProtocolError(f"cannot encode a frame: {err}") from None


def pack_envelope(env: Envelope) -> bytes:
    return packb({"type": env.type.value, "payload": env.payload, "seq": env.seq, "timestamp": env.timestamp}, "vla-eval")


# -- decoding -------------------------------------------------------------------------


def _get(obj: Mapping[Any, Any], name: str) -> Any:
    return obj[name] if name in obj else obj.get(name.encode())


def _decode_array(obj: Mapping[Any, Any]) -> np.ndarray:
    try:
        dtype = np.dtype(_get(obj, "dtype"))
        shape = tuple(int(n) for n in _get(obj, "shape"))
        data = _get(obj, "data")
    except (TypeError, ValueError) as err:
        raise ProtocolError(f"an __ndarray__ map has a bad dtype or shape ({err})") from None
    _check_dtype(dtype)
    if not isinstance(data, bytes | bytearray):
        raise ProtocolError(f"an __ndarray__ map's data is {type(data).__name__}, expected bytes")
    if any(n < 0 for n in shape) or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != len(data):
        raise ProtocolError(f"an __ndarray__ of shape {list(shape)} and dtype {dtype} needs {int(np.prod(shape)) * dtype.itemsize} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _decode_image(obj: Mapping[Any, Any]) -> np.ndarray:
    fmt = _get(obj, "format")
    if fmt == "raw":
        return _decode_array(obj)
    if fmt not in ("png", "jpeg"):
        raise ProtocolError(f"an __image__ map has format {fmt!r}; expected raw, png or jpeg")
    from PIL import Image  # optional: pillow, only for png/jpeg images

    try:
        return np.array(Image.open(io.BytesIO(_get(obj, "data"))))
    except Exception as err:  # PIL raises many kinds for a bad image
        raise ProtocolError(f"an __image__ ({fmt}) cannot be decoded ({type(err).__name__}: {err})") from None


def _object_hook(obj: dict[Any, Any]) -> Any:
    if "__ndarray__" in obj or b"__ndarray__" in obj:
        return _decode_array(obj)
    if "__image__" in obj or b"__image__" in obj:
        return _decode_image(obj)
    if b"__npgeneric__" in obj or "__npgeneric__" in obj:
        dtype = np.dtype(_get(obj, "dtype"))
        _check_dtype(dtype)
        return dtype.type(_get(obj, "data"))
    return obj


def unpackb(data: bytes | str) -> Any:
    """Decode one frame; ProtocolError saying why it is not one."""
    import msgpack  # optional: msgpack (the remote extra)

    if isinstance(data, str):
        raise ProtocolError("got a text frame; frames are binary msgpack")
    try:
        return msgpack.unpackb(data, object_hook=_object_hook, raw=False, strict_map_key=False)
    except ProtocolError:
        raise
    except Exception as err:  # msgpack's own errors, or a bad dtype string
        raise ProtocolError(f"not a msgpack frame ({len(data)} bytes): {type(err).__name__}: {err}") from None


def as_envelope(obj: Any) -> Envelope | None:
    """The vla-eval envelope `obj` is, or None when it is not one (an openpi map)."""
    if not isinstance(obj, dict) or "type" not in obj or "payload" not in obj:
        return None
    try:
        kind = MessageType(obj["type"])
    except ValueError:
        raise ProtocolError(f"unknown message type {obj['type']!r}; expected one of {', '.join(t.value for t in MessageType)}") from None
    payload = obj["payload"]
    if not isinstance(payload, dict):
        raise ProtocolError(f"a {kind.value} message's payload is {type(payload).__name__}, expected a map")
    seq = obj.get("seq", 0)
    if not isinstance(seq, int):
        raise ProtocolError(f"a {kind.value} message's seq is {type(seq).__name__}, expected an integer")
    stamp = obj.get("timestamp", 0.0)
    return Envelope(kind, payload, seq, float(stamp) if isinstance(stamp, int | float) else 0.0)


def first_line(text: str) -> str:
    """The line of a (traceback) text that says what went wrong."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]
