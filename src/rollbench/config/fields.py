"""Dataclass fields documented for `--help`, and strict string -> value coercion.

Config classes declare fields with `opt(default, "help text")`. The CLI hands this module
a flat `{name: "string value"}` mapping; `build()` coerces each value to the field's
annotated type and raises a `ConfigError` naming the flag for anything it cannot accept.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from rollbench.errors import ConfigError, did_you_mean

T = TypeVar("T")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def opt(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with help text (shown by `--help`)."""
    metadata = {"help": help}
    if callable(default) and not isinstance(default, type) and kwargs.pop("factory", False):
        return dataclasses.field(default_factory=default, metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def describe_type(tp: Any) -> str:
    """A short human name for a field type, for errors and --help."""
    origin = get_origin(tp)
    if origin is Literal:
        return "|".join(str(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return describe_type(args[0]) if len(args) == 1 else " or ".join(map(describe_type, args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "|".join(str(m.value) for m in tp)
    if tp is bool:
        return "true|false"
    if tp is int:
        return "int"
    if tp is float:
        return "float"
    if origin is tuple:
        return "comma list"
    if origin is dict:
        return "json object"
    return "str"


def coerce(flag: str, raw: str, tp: Any) -> Any:
    """Turn the string `raw` given for `flag` into a value of type `tp`, or raise ConfigError."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(flag, raw, tp)
    if origin is Literal:
        choices = get_args(tp)
        if raw in choices:
            return raw
        raise ConfigError(f"{flag}={raw!r} is not allowed; choose one of: {', '.join(map(str, choices))}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(raw)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise ConfigError(f"{flag}={raw!r} is not allowed; choose one of: {allowed}") from None
    if tp is bool or tp is int or tp is float:
        return _coerce_scalar(flag, raw, tp)
    if origin is tuple:
        return _coerce_comma_list(flag, raw, tp)
    if origin is dict:
        return _coerce_json_object(flag, raw)
    return raw


def _coerce_union(flag: str, raw: str, tp: Any) -> Any:
    """`raw` as the first of the union `tp`'s types that accepts it (None for none, null or an
    empty string when the union allows None)."""
    args = get_args(tp)
    if type(None) in args and raw.strip().lower() in {"none", "null", ""}:
        return None
    errors = []
    for arg in (a for a in args if a is not type(None)):
        try:
            return coerce(flag, raw, arg)
        except ConfigError as err:
            errors.append(str(err))
    raise ConfigError(errors[0] if len(errors) == 1 else f"{flag}={raw!r}: expected {describe_type(tp)}")


def _coerce_scalar(flag: str, raw: str, tp: type) -> bool | int | float:
    """`raw` as a bool, an int or a float, whichever `tp` is."""
    if tp is bool:
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{flag}={raw!r}: expected true or false")
    if tp is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{flag}={raw!r}: expected an integer") from None
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"{flag}={raw!r}: expected a number") from None


def _coerce_comma_list(flag: str, raw: str, tp: Any) -> tuple[Any, ...]:
    """`raw`'s comma-separated items (blanks dropped), as ints when `tp` is a tuple of ints."""
    parts = tuple(part.strip() for part in raw.split(",") if part.strip())
    args = typing.get_args(tp)
    if args and args[0] is int:
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(f"{flag}={raw!r}: expected whole numbers separated by commas") from None
    return parts


def _coerce_json_object(flag: str, raw: str) -> dict[str, Any]:
    """`raw` read as a JSON object."""
    import json  # lazy: `rollbench --help` does not load json (start-up time)

    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{flag}={raw!r}: expected a JSON object ({err.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}={raw!r}: expected a JSON object")
    return value


def build(cls: type[T], values: Mapping[str, str], prefix: str, **fixed: Any) -> T:
    """Build dataclass `cls` from string `values` (keys without `prefix`)."""
    hints = type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = dict(fixed)
    for key, raw in values.items():
        flag = f"--{prefix}{key}"
        if key not in fields:
            hint = did_you_mean(key, fields, f"--{prefix}{{}}".format)
            raise ConfigError(f"unknown flag {flag}.{hint} See `rollbench eval --help`.")
        kwargs[key] = coerce(flag, raw, hints[key])
    return cls(**kwargs)


def field_help(cls: type, prefix: str) -> list[tuple[str, str, str]]:
    """(flag, type/default, help) rows for every init field of `cls`."""
    hints = type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name == "type":
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "required"
        if isinstance(default, enum.Enum):
            default = default.value
        if isinstance(default, tuple):
            default = ",".join(default)
        rows.append((f"--{prefix}{f.name}", f"{describe_type(hints[f.name])}, default {default}", f.metadata.get("help", "")))
    return rows


def to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (enums as values, tuples as lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    type_name = getattr(type(obj), "type_name", None)
    if type_name is not None:
        out = {"type": type_name, **out}
    return out
