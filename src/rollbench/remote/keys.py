"""Observation keys between rollbench's batch and a policy server's requests.

rollbench's batch holds LeRobot keys (`observation.state`, `observation.images.image`, ...).
The default wire key of each, per dialect:

| rollbench key | openpi | vla-eval |
| --- | --- | --- |
| `observation.state` | `observation/state` | `state` |
| `observation.images.NAME` | `observation/NAME` | `images/NAME` |
| `observation.image` | `observation/image` | `images/image` |
| `observation.OTHER` | `observation/OTHER` | `OTHER` |

and, for `--env.type=libero` in the openpi dialect, openpi's LIBERO example keys:
`observation.images.image` -> `observation/image`, `observation.images.image2` ->
`observation/wrist_image`, `observation.state` -> `observation/state`. The task's
description travels as `prompt` (openpi) or `task_description` (vla-eval).

In the vla-eval dialect a `/` in a wire key nests (`images/agentview` is
`{"images": {"agentview": ...}}`); openpi's keys are flat strings with slashes, as its own
clients send them. `--policy.keys` (client) and `--serve.keys` (server) replace the default:
`rollbench_key=wire_key` pairs separated by commas, or `@file.json` holding that map; the
named keys are the only ones sent or read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError
from rollbench.remote.wire import Dialect

#: per benchmark type and dialect: explicit defaults where the field has a convention
DEFAULTS: dict[tuple[str, str], dict[str, str]] = {
    ("libero", "openpi"): {
        "observation.images.image": "observation/image",
        "observation.images.image2": "observation/wrist_image",
        "observation.state": "observation/state",
    },
}

PROMPT_KEY = {"openpi": "prompt", "vla-eval": "task_description"}


def parse_keys(flag: str, spec: str | None) -> dict[str, str] | None:
    """`a=b,c=d` or `@file.json` -> {rollbench key: wire key}; None when not given."""
    if spec is None or spec == "":
        return None
    if spec.startswith("@"):
        path = Path(spec[1:])
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ConfigError(f"{flag}={spec}: cannot read a JSON map from {path} ({type(err).__name__}: {err})") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise ConfigError(f"{flag}={spec}: {path} must hold a JSON object of rollbench key -> wire key strings")
        return dict(data)
    out: dict[str, str] = {}
    for pair in spec.split(","):
        ours, eq, theirs = pair.partition("=")
        if not eq or not ours.strip() or not theirs.strip():
            raise ConfigError(f"{flag}={spec}: {pair!r} is not ROLLBENCH_KEY=WIRE_KEY (e.g. observation.state=observation/state)")
        out[ours.strip()] = theirs.strip()
    if len(set(out.values())) != len(out):
        raise ConfigError(f"{flag}={spec}: two rollbench keys map to one wire key")
    return out


def rule_wire_key(key: str, dialect: Dialect) -> str:
    """The default wire key of a rollbench key when no explicit mapping names it."""
    rest = key.removeprefix("observation.")
    if dialect == "openpi":
        return "observation/" + rest.replace(".", "/") if key.startswith("observation.") else key.replace(".", "/")
    if rest.startswith("images."):
        return "images/" + rest.removeprefix("images.")
    if rest == "image":
        return "images/image"
    return rest.replace(".", "_")


def rule_rollbench_keys(wire: str, dialect: Dialect) -> list[str]:
    """The rollbench keys whose default wire key is `wire` (vla-eval's `images/image` is
    `observation.image` or `observation.images.image`), most likely first."""
    if dialect == "openpi":
        return [wire.replace("/", ".")]
    if wire == "images/image":
        return ["observation.images.image", "observation.image"]
    if wire.startswith("images/"):
        return ["observation.images." + wire.removeprefix("images/")]
    return ["observation." + wire]


class KeyMap:
    """Rows of rollbench's batch <-> request maps of one dialect."""

    def __init__(
        self, dialect: Dialect, benchmark_type: str = "", explicit: Mapping[str, str] | None = None,
        known: frozenset[str] = frozenset(),
    ) -> None:
        self.dialect = dialect
        self.known = known  # the benchmark's keys: they settle an ambiguous wire key
        if explicit is None:
            explicit = DEFAULTS.get((benchmark_type, dialect))
            self.only_explicit = False
        else:
            self.only_explicit = True
        self.explicit = dict(explicit or {})
        self.inverse = {v: k for k, v in self.explicit.items()}

    def wire_key(self, key: str) -> str | None:
        if key in self.explicit:
            return self.explicit[key]
        return None if self.only_explicit else rule_wire_key(key, self.dialect)

    def to_wire(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """One row's observations (rollbench keys) as a request map (without the prompt)."""
        out: dict[str, Any] = {}
        for key, value in row.items():
            wire = self.wire_key(key)
            if wire is None:
                continue
            if self.dialect == "vla-eval" and "/" in wire:
                head, _, tail = wire.partition("/")
                out.setdefault(head, {})[tail] = value
            else:
                out[wire] = value
        return out

    def from_wire(self, request: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        """A request map's arrays under rollbench keys; nested vla-eval maps are flattened."""
        flat: dict[str, Any] = {}
        for key, value in request.items():
            if not isinstance(key, str) or key in skip:
                continue
            if self.dialect == "vla-eval" and isinstance(value, dict):
                for sub, inner in value.items():
                    flat[f"{key}/{sub}"] = inner
            else:
                flat[key] = value
        out: dict[str, Any] = {}
        for wire, value in flat.items():
            if wire in self.inverse:
                out[self.inverse[wire]] = value
            elif not self.only_explicit and not isinstance(value, str | dict):
                keys = rule_rollbench_keys(wire, self.dialect)
                out[next((k for k in keys if k in self.known), keys[0])] = value
        return out
