"""A policy from user code: `--policy.path=pkg.mod:factory`.

`factory(ctx)` (or `factory()` if it takes no argument) returns an object with `act(batch,
slots)` and optionally `reset(slots, episodes)`; a plain callable `act` is not enough on
its own because rollbench must know whether the policy keeps per-slot state: set
`per_slot_state = False` on the object to ask for lockstep mode.

The same object handed to `rollbench.Evaluator.evaluate` in Python is wrapped the same way
(`wrap`); its run's config names it `--policy.type=object` (`handed_policy`: flags cannot
build it).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rollbench.errors import ConfigError
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext


class ModulePolicy(Policy):
    """Wraps a user object, forwarding the protocol and its flags."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self.per_slot_state = bool(getattr(inner, "per_slot_state", True))  # type: ignore[misc]
        self.cheap = bool(getattr(inner, "cheap", False))  # type: ignore[misc]
        self.steps_per_inference = max(1, int(getattr(inner, "steps_per_inference", 1) or 1))

    def __copy__(self) -> ModulePolicy:
        """A shallow copy of the user's object too: shared weights, its own episode state."""
        return ModulePolicy(copy.copy(self.inner), self.name)

    def torch_modules(self) -> Sequence[Any]:
        """The object's own `torch_modules()`; else the object, if it is a torch module; else
        the torch modules among its attributes."""
        own = getattr(self.inner, "torch_modules", None)
        if own is not None:
            return list(own())
        torch = sys.modules.get("torch")  # a policy without torch never imported it: nothing to watch
        if torch is None:
            return []
        if isinstance(self.inner, torch.nn.Module):
            return [self.inner]
        return [v for v in getattr(self.inner, "__dict__", {}).values() if isinstance(v, torch.nn.Module)]

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        reset = getattr(self.inner, "reset", None)
        if reset is not None:
            reset(slots, episodes)

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        return np.asarray(self.inner.act(batch, slots))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def resolve(path: str | None) -> Any:
    """Import `pkg.mod:attr`, with errors that name the flag."""
    if not path or ":" not in path:
        raise ConfigError(f"--policy.path={path!r} is not allowed for --policy.type=module; expected pkg.mod:factory")
    module_name, attr = path.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure is the user's module's
        raise ConfigError(f"--policy.path={path!r}: cannot import {module_name!r} ({type(err).__name__}: {err})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"--policy.path={path!r}: module {module_name!r} has no attribute {attr!r}") from None


def load_module_policy(ctx: PolicyContext) -> Policy:
    path = ctx.config.path
    factory = resolve(path)
    if not callable(factory):
        raise ConfigError(f"--policy.path={path!r} is not callable; expected a factory returning a policy")
    try:
        takes_ctx = len(inspect.signature(factory).parameters) > 0
    except (TypeError, ValueError):
        takes_ctx = True
    inner = factory(ctx) if takes_ctx else factory()
    return wrap(inner, path or "", f"--policy.path={path!r}: the factory returned")


def wrap(inner: Any, name: str, came: str) -> ModulePolicy:
    """A user's object as a policy; one without `act` is a one-line ConfigError that begins
    with `came` (where it came from: a factory, the Python API's caller)."""
    if not callable(getattr(inner, "act", None)):
        raise ConfigError(f"{came} {type(inner).__name__}, which has no act(batch, slots)")
    return ModulePolicy(inner, name)


def handed_policy(ctx: PolicyContext) -> Policy:
    """A policy object handed to `rollbench.Evaluator` in Python (nothing to build from flags)."""
    raise ConfigError(
        f"--policy.type=object is a policy object that was handed to rollbench.Evaluator in Python "
        f"(--policy.path={ctx.config.path!r} names it); flags cannot build it: evaluate it from Python again "
        f"(the same name resumes its run), or give --policy.type=module --policy.path=pkg.mod:factory"
    )
