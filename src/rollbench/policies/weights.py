"""Policies that change their own weights while they act (test-time training).

A policy that calls `backward()` and an optimizer step inside `act` and keeps the result
makes each episode depend on every episode it acted on before, on its batch-mates and so
on the worker count and the order: the numbers no longer describe the checkpoint.

`WeightWatch` notices such a policy at the cost of a sum per call: torch bumps a tensor's
in-place version counter (`tensor._version`) on every in-place write, an optimizer step
included, so a changed sum over the parameters means a call wrote into them, without
reading a single weight; and torch calls a global hook whenever a module is given a new
parameter object (`module.weight = nn.Parameter(...)`). `StepContext.act` raises on the
first such call unless `--policy.fresh_weights=true`, which wraps the policy in
`FreshWeights`: every episode acts with its own copy of the policy as it was built, one row
per call.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rollbench.config.env import BenchmarkConfig
from rollbench.errors import ConfigError
from rollbench.policies.base import EpisodeStart, Policy


def torch_modules(policy: Any) -> Sequence[Any]:
    """`policy.torch_modules()`, or none for a duck-typed policy without the hook."""
    hook = getattr(policy, "torch_modules", None)
    return list(hook()) if hook is not None else []


#: parameters registered on any torch module of this process since the first watch began (torch
#: calls a global hook for each): a watch reads the identities of its parameters only when this moved
_registrations = [0]
_hook: Any = None


def _count_registrations() -> None:
    global _hook
    if _hook is None:
        from torch.nn.modules.module import register_module_parameter_registration_hook  # optional: torch

        def count(module: Any, name: str, param: Any) -> None:
            _registrations[0] += 1

        _hook = register_module_parameter_registration_hook(count)


class WeightWatch:
    """The parameters of a policy's torch modules, as they were when it was first watched."""

    def __init__(self, modules: Sequence[Any]) -> None:
        # (the dict that holds a parameter, its name, the parameter): a parameter replaced by
        # another object (`module.weight = nn.Parameter(...)`) no longer matches
        self._entries = [
            (sub._parameters, name, p)
            for module in modules for sub in module.modules() for name, p in sub._parameters.items() if p is not None
        ]
        self._params = [p for _, _, p in self._entries]
        self._seen = [p._version for p in self._params]
        self._total = sum(self._seen)
        if self._params:
            _count_registrations()
        self._registered = _registrations[0]

    def __len__(self) -> int:
        return len(self._params)

    def changed(self) -> int:
        """How many parameter tensors were written or replaced since the watch began (0: none)."""
        if sum(p._version for p in self._params) == self._total:
            if _registrations[0] == self._registered:
                return 0  # the common case, at ~0.1 us per tensor: no write, no parameter assigned anywhere
            if all(d.get(n) is p for d, n, p in self._entries):
                self._registered = _registrations[0]  # another module's parameter
                return 0
        return sum(1 for (d, n, p), v in zip(self._entries, self._seen, strict=True) if p._version != v or d.get(n) is not p)


def _row(batch: Any, row: int) -> Any:
    """Row `row` of a policy batch, keeping the batch axis (arrays, tensors, lists, dicts of them)."""
    if isinstance(batch, Mapping):
        return {k: _row(v, row) for k, v in batch.items()}
    return batch[row : row + 1]


class _Streams:
    """torch's global random stream, one per slot: a copy that draws from it (dropout, noise)
    draws its own episode's numbers, seeded from the episode's seed, whatever the other
    episodes drew in between (the rows of one call run one after another)."""

    #: the stream is one per process: lockstep's parallel tasks (threads) take turns with it
    lock = threading.Lock()

    def __init__(self) -> None:
        self._states: dict[int, tuple[Any, Any]] = {}

    @contextlib.contextmanager
    def of(self, slot: int, seed: int | None = None) -> Iterator[None]:
        """Inside: `slot`'s stream (a new one from `seed` when given); outside: the caller's."""
        torch = sys.modules.get("torch")  # a policy without torch draws nothing from it
        if torch is None:
            yield
            return
        with self.lock:
            cuda = torch.cuda.is_initialized()
            outside = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None)
            if seed is not None:
                torch.manual_seed(seed)
            else:
                cpu, gpu = self._states[slot]
                torch.set_rng_state(cpu)
                if cuda and gpu is not None:
                    torch.cuda.set_rng_state_all(gpu)
            try:
                yield
            finally:
                self._states[slot] = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None)
                torch.set_rng_state(outside[0])
                if outside[1] is not None:
                    torch.cuda.set_rng_state_all(outside[1])


def check_has_weights(policy: Any) -> None:
    """--policy.fresh_weights=true on a policy without torch weights would copy nothing and change
    nothing, which the user would take as applied: refused when the policy is built. A policy that
    loads in the background (its own `ready`: LeRobot's) is not waited for here; it has weights."""
    if isinstance(policy, Policy) and type(policy).ready is not Policy.ready:
        return
    if not torch_modules(policy):
        name = getattr(policy, "name", None) or type(policy).__name__
        raise ConfigError(
            f"--policy.fresh_weights=true gives each episode its own copy of the policy's torch weights, and policy "
            f"{name} has none (its torch_modules() is empty), so nothing could change between episodes; drop the flag "
            f"(a policy that trains at test time must list its modules in torch_modules())"
        )


class FreshWeights(Policy):
    """`--policy.fresh_weights=true`: each episode acts with its own deep copy of the policy as
    it was built, made at its slot's reset and called with that slot's row alone, so what one
    episode's calls write into the weights reaches no other episode, batch-mates included."""

    def __init__(self, pristine: Any) -> None:
        check_has_weights(pristine)
        self.pristine = pristine  # never called: the source of every episode's copy
        self.cheap = bool(getattr(pristine, "cheap", False))  # type: ignore[misc]
        self.steps_per_inference = max(1, int(getattr(pristine, "steps_per_inference", 1) or 1))
        self._copies: dict[int, Any] = {}  # per_slot_state stays True: each slot has its own copy
        self._streams = _Streams()

    def __copy__(self) -> FreshWeights:
        """The same pristine policy (only read), no episode's copy (lockstep runs one per task)."""
        return FreshWeights(self.pristine)

    def ready(self) -> None:
        ready = getattr(self.pristine, "ready", None)
        if ready is not None:
            ready()

    def torch_modules(self) -> Sequence[Any]:
        return torch_modules(self.pristine)

    def env_processors(self, benchmark: BenchmarkConfig) -> tuple[Any, Any] | None:
        own = getattr(self.pristine, "env_processors", None)
        return own(benchmark) if own is not None else None

    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        self.ready()  # a policy that loads in the background is copied once loaded
        for slot, episode in zip(slots, episodes, strict=True):
            mine = copy.deepcopy(self.pristine)  # the last episode's copy is dropped, not closed: close is the pristine's
            reset = getattr(mine, "reset", None)
            with self._streams.of(slot, seed=episode.seed):
                if reset is not None:
                    reset([slot], [episode])
            self._copies[slot] = mine

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        out = []
        for row, slot in enumerate(slots):
            with self._streams.of(slot):
                out.append(np.asarray(self._copies[slot].act(_row(batch, row), [slot])))
        return np.concatenate(out)

    def close(self) -> None:
        self._copies = {}
        close = getattr(self.pristine, "close", None)
        if close is not None:
            close()
