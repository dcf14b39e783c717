"""Per-row noise for LeRobot policies that draw theirs from torch's global RNG and take no
`noise=` argument (GR00T's flow-matching head, X-VLA's sampler, Multi-Task DiT's DDPM, EO-1's
flow matching).

Such a policy draws one batch-shaped `torch.randn(B, ...)` (EO-1: `torch.normal(0.0, 1.0,
size=(B, ...))`) per chunk, so a row's actions depend on which rows share its call. `RowNoise`
is a torch function mode around one `predict_action_chunk` call: it answers every such
`torch.randn` (or `torch.normal`) whose first dimension is the
call's row count with one draw per row, each from that row's own generator (its episode's),
and the rest of the call runs untouched. One row per call gives exactly what the policy's
own draw gives after `torch.manual_seed` with that generator's seed: the same values, in the
same order. Any other draw from the global RNG inside the call (a LeRobot release that
samples differently) stops the run with a clear error instead of a silently batch-dependent
episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from rollbench.errors import PolicyError

#: torch's samplers that read the global RNG when no `generator=` is given
GLOBAL_DRAWS = frozenset({
    torch.rand, torch.rand_like, torch.randn_like, torch.randint, torch.randint_like,
    torch.normal, torch.bernoulli, torch.multinomial, torch.poisson, torch.randperm,
})


def _size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...] | None:
    """The shape a `torch.randn(*size)` / `torch.randn(size)` / `torch.randn(size=...)` asks for."""
    if "size" in kwargs:
        return tuple(int(n) for n in kwargs["size"])
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(int(n) for n in args[0])
    if args and all(isinstance(n, int) for n in args):
        return tuple(args)
    return None


class RowNoise(TorchFunctionMode):
    """Inside: each `torch.randn` (or `torch.normal` of float mean and std) of `len(generators)`
    rows draws row i from `generators[i]`."""

    def __init__(self, generators: Sequence[torch.Generator], policy_type: str) -> None:
        super().__init__()
        self.generators = list(generators)
        self.policy_type = policy_type
        self.draws = 0  # batch-shaped draws answered per row

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if kwargs.get("generator") is None and "out" not in kwargs:
            if func is torch.randn:
                size = _size(args, kwargs)
                if size and size[0] == len(self.generators):
                    self.draws += 1
                    dtype = kwargs.get("dtype")
                    rows = [torch.randn((1, *size[1:]), generator=g, dtype=dtype) for g in self.generators]
                    device = kwargs.get("device")
                    out = torch.cat(rows)
                    return out if device is None else out.to(device)
            if func is torch.normal and "size" in kwargs:  # normal(mean, std, size=...): EO-1's flow-matching noise
                size = _size(args, kwargs)
                mean, std = (args + (kwargs.get("mean", 0.0), kwargs.get("std", 1.0))[len(args):])[:2]
                if size and size[0] == len(self.generators) and isinstance(mean, float) and isinstance(std, float):
                    self.draws += 1
                    rest = {k: v for k, v in kwargs.items() if k in ("dtype", "layout")}
                    rows = [torch.normal(mean, std, size=(1, *size[1:]), generator=g, **rest) for g in self.generators]
                    device = kwargs.get("device")
                    out = torch.cat(rows)
                    return out if device is None else out.to(device)
            if func is torch.randn or func in GLOBAL_DRAWS:
                raise PolicyError(
                    f"{self.policy_type!r} policy drew {getattr(func, '__name__', func)}"
                    f"{_size(args, kwargs) or ''} from torch's global RNG, which rollbench does not split per "
                    f"row for this LeRobot release; run it with --policy.seeding=lerobot-eval (lockstep, the policy's own draws)"
                )
        return func(*args, **kwargs)
