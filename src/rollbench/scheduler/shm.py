"""Per-worker shared-memory files: a heartbeat and one observation row per slot.

The driver creates one file per worker (in /dev/shm when it exists); the worker maps the
same file. Observations are written by the worker into its slots' rows and read by the
driver without pickling. Plain files + `np.memmap` instead of `multiprocessing.shared_memory`
because the latter's resource tracker warns about, or unlinks, segments that a spawned
child attached to (CPython issue 82300 and friends).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

# header: float64 beat (time.monotonic of the worker's last sign of life) at byte 0, and at
# byte 8 the int64 slot the worker is inside a reset/step of (-1: none), so that a unit
# whose reset hangs or crashes the process is known even before it has started.
HEADER_BYTES = 64


@dataclass(frozen=True)
class ArraySpec:
    key: str  # "" for a plain Box observation
    shape: tuple[int, ...]
    dtype: str


def obs_layout(space: Any) -> tuple[ArraySpec, ...] | None:
    """Array specs of a Box or Dict-of-Box observation space; None when not flat."""
    if isinstance(space, gym.spaces.Box):
        return (ArraySpec("", tuple(space.shape or ()), np.dtype(space.dtype).str),)
    if isinstance(space, gym.spaces.Dict) and all(isinstance(s, gym.spaces.Box) for s in space.spaces.values()):
        return tuple(ArraySpec(k, tuple(s.shape or ()), np.dtype(s.dtype).str) for k, s in space.spaces.items())
    return None


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class SlotBuffer:
    """Observation rows for `n_slots` slots (+ heartbeat), in a file or in private memory."""

    def __init__(self, layout: Sequence[ArraySpec] | None, n_slots: int, path: str | None = None, create: bool = False) -> None:
        self.layout = tuple(layout or ())
        self.n_slots = n_slots
        self.path = path
        sizes = [int(np.prod((n_slots, *s.shape))) * np.dtype(s.dtype).itemsize for s in self.layout]
        total = HEADER_BYTES + sum(sizes)
        if path is None:
            self._buf: Any = np.zeros(total, dtype=np.uint8)
        else:
            if create:
                with open(path, "wb") as fh:
                    fh.truncate(total)
            self._buf = np.memmap(path, dtype=np.uint8, mode="r+", shape=(total,))
        self.beat = self._buf[:8].view(np.float64)
        self.current = self._buf[8:16].view(np.int64)
        self.arrays: dict[str, np.ndarray] = {}
        offset = HEADER_BYTES
        for spec, size in zip(self.layout, sizes, strict=True):
            self.arrays[spec.key] = self._buf[offset : offset + size].view(spec.dtype).reshape((n_slots, *spec.shape))
            offset += size

    def touch(self, slot: int = -1) -> None:
        """Sign of life; `slot` >= 0 while inside that slot's reset or step."""
        self.current[0] = slot
        self.beat[0] = time.monotonic()

    def write(self, slot: int, obs: Any) -> None:
        if isinstance(obs, Mapping):
            for key, arr in self.arrays.items():
                arr[slot] = obs[key]
        else:
            self.arrays[""][slot] = obs

    def read(self, slots: Sequence[int]) -> Any:
        """The observations of `slots`, stacked (a copy), in the env's own format."""
        idx = np.asarray(slots, dtype=np.intp)
        if "" in self.arrays and len(self.arrays) == 1:
            return self.arrays[""][idx]
        return {key: arr[idx] for key, arr in self.arrays.items()}

    def close(self, unlink: bool = False) -> None:
        self.arrays = {}
        self._buf = None  # the mapping closes when the last view is gone
        if unlink and self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


