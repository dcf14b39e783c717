"""Small policy factories for tests, referenced as `--policy.path=helpers_policies:NAME`.

tests/ is on sys.path under pytest, and on PYTHONPATH for `run_subprocess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class _Const:
    """Returns `value` for every row, with the action space's shape (or `shape`)."""

    def __init__(self, ctx: Any, value: float, shape: tuple[int, ...] | None = None) -> None:
        self.shape = tuple(ctx.action_space.shape) if shape is None else shape
        self.value = value
        # the space's own dtype (int for Discrete), unless the value cannot be one (NaN)
        self.dtype = ctx.action_space.dtype if np.isfinite(value) else np.float32

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        return np.full((len(slots), *self.shape), self.value, dtype=self.dtype)


def zeros(ctx: Any) -> _Const:
    """A well-behaved policy: all-zero actions."""
    return _Const(ctx, 0.0)


def wrong_shape(ctx: Any) -> _Const:
    """Actions with one dimension too many per row."""
    return _Const(ctx, 0.0, shape=(*ctx.action_space.shape, 3))


def nan_actions(ctx: Any) -> _Const:
    """NaN actions of the right shape."""
    return _Const(ctx, float("nan"))


class _Raises:
    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        raise RuntimeError("boom from the policy")


def raises() -> _Raises:
    """A policy whose act() raises (a zero-argument factory)."""
    return _Raises()


def not_a_policy() -> object:
    """A factory that returns something without act()."""
    return object()


def float_actions(ctx: Any) -> _Const:
    """Float actions whatever the space (wrong for a Discrete one)."""
    policy = _Const(ctx, 0.0)
    policy.dtype = np.dtype(np.float32)
    return policy


class _Chunky:
    """A chunking 'network': a call costs 1 ms + 0.2 ms per dry row and fills 5 steps per slot."""

    steps_per_inference = 5

    def __init__(self, ctx: Any) -> None:
        self.shape = tuple(ctx.action_space.shape)
        self.queues: dict[int, int] = {}

    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        for s in slots:
            self.queues.pop(s, None)

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        import time

        dry = [s for s in slots if not self.queues.get(s)]
        if dry:
            time.sleep(0.001 + 0.0002 * len(dry))
            for s in dry:
                self.queues[s] = self.steps_per_inference
        for s in slots:
            self.queues[s] -= 1
        return np.zeros((len(slots), *self.shape), dtype=np.float32)


def make_chunky(ctx: Any) -> _Chunky:
    """A per-slot chunking policy with a known cost per call."""
    return _Chunky(ctx)


class _AtMostTwoRows(_Const):
    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        if len(slots) > 2:
            raise RuntimeError(f"called with {len(slots)} rows")
        return super().act(batch, slots)


def at_most_two_rows(ctx: Any) -> _Const:
    """Zeros; raises when a call has more than 2 rows (checks --policy.max_batch_size as a bound)."""
    return _AtMostTwoRows(ctx, 0.0)


class _Recording(_Const):
    """Zeros; appends one line per call to $ROLLBENCH_TEST_RECORD: `<pid> <MUJOCO_GL> <rows>`
    (and one at construction with rows = -1), so a test sees what every process ran with."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx, 0.0)
        self._note(-1)

    def _note(self, rows: int) -> None:
        import os

        with open(os.environ["ROLLBENCH_TEST_RECORD"], "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {os.environ.get('MUJOCO_GL', '-')} {rows}\n")

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        self._note(len(slots))
        return super().act(batch, slots)


def recording(ctx: Any) -> _Const:
    """Zeros, recording each process's MUJOCO_GL and each call's rows (see _Recording)."""
    return _Recording(ctx)


class _RecordingLockstep(_Recording):
    per_slot_state = False  # lerobot-eval's kind of policy: runs in lockstep mode


def recording_lockstep(ctx: Any) -> _Const:
    return _RecordingLockstep(ctx)


class _CheapRecording(_Recording):
    cheap = True  # runs inside the env workers (worker placement)


def cheap_recording(ctx: Any) -> _Const:
    return _CheapRecording(ctx)


class _CheapZeros(_Const):
    cheap = True  # runs inside the env workers (worker placement)


def dies_in_workers(ctx: Any) -> _Const:
    """Builds in the main process; a worker process that builds it exits at once (a broken
    import on the workers' side, say), before it can run any episode."""
    import multiprocessing
    import os
    import sys

    if multiprocessing.parent_process() is not None:
        print("dies_in_workers: exiting", file=sys.stderr, flush=True)
        os._exit(3)
    return _CheapZeros(ctx, 0.0)


def fails_in_ray_actors(ctx: Any) -> _Const:
    """Builds in the driver; raises in a Ray actor's __init__ (a package missing on a node)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
        raise ImportError("No module named 'simulator_x' (only on this node)")
    return _CheapZeros(ctx, 0.0)


class NeedsRenamedState:
    """Acts from `observation.pos` only: the fake env gives it under another name."""

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        pos = np.asarray(batch["observation.pos"])
        return np.clip(pos[:, 2:4] - pos[:, 0:2], -1, 1).astype(np.float32)


def needs_renamed_state() -> NeedsRenamedState:
    return NeedsRenamedState()


class _RaisesInReset(_Const):
    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        raise ValueError("boom from reset")


def raises_in_reset(ctx: Any) -> _Const:
    """Acts well, but its reset raises (its own bug)."""
    return _RaisesInReset(ctx, 0.0)


class _CheapRaisesInReset(_RaisesInReset):
    cheap = True  # runs inside the env workers (worker placement)


def cheap_raises_in_reset(ctx: Any) -> _Const:
    return _CheapRaisesInReset(ctx, 0.0)


class _ClosesToFile(_Const):
    """Appends `closed <pid>` to $CLOSED_LOG when closed (a connection, a model's memory freed)."""

    cheap = True  # runs inside the env workers (worker placement)

    def close(self) -> None:
        import os

        with open(os.environ["CLOSED_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"closed {os.getpid()}\n")


def closes_to_file(ctx: Any) -> _Const:
    return _ClosesToFile(ctx, 0.0)


class _Hangs(_Const):
    """Acts like `zeros`, but never returns from the call (`act`, or `reset` with $HANG_IN=reset)
    on the episode whose seed is $HANG_SEED: a deadlocked policy, a server that never answers.
    $HANG_HOW=blocked also blocks every signal in the hung thread (C code that holds on)."""

    def __init__(self, ctx: Any) -> None:
        import os

        super().__init__(ctx, 0.0)
        self.seed = int(os.environ.get("HANG_SEED", "-1"))
        self.where = os.environ.get("HANG_IN", "act")
        self.how = os.environ.get("HANG_HOW", "sleep")
        self.seeds: dict[int, int] = {}

    def _hang(self) -> None:
        import signal
        import sys
        import time

        print(f"hanging policy: hangs in {self.where} on seed {self.seed}", file=sys.stderr, flush=True)
        if self.how == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        while True:
            time.sleep(3600)

    def reset(self, slots: Sequence[int], episodes: Sequence[Any]) -> None:
        for slot, episode in zip(slots, episodes, strict=True):
            self.seeds[slot] = episode.seed
        if self.where == "reset" and any(e.seed == self.seed for e in episodes):
            self._hang()

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        if self.where == "act" and any(self.seeds.get(s) == self.seed for s in slots):
            self._hang()
        return super().act(batch, slots)


def hangs(ctx: Any) -> _Const:
    """A policy that hangs on one episode ($HANG_SEED); see `_Hangs`."""
    return _Hangs(ctx)


class _KillsAWorker(_Const):
    """Acts like `zeros`; at its $KILL_AT_CALL-th act call (default 3) it SIGKILLs one env
    worker of this run (a grandchild of this process, through the forkserver), which is
    waiting for its next step then: killed from outside, between env calls."""

    def __init__(self, ctx: Any) -> None:
        import os

        super().__init__(ctx, 0.0)
        self.at = int(os.environ.get("KILL_AT_CALL", "3"))
        self.calls = 0
        self.killed: int | None = None

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        import os
        import signal

        self.calls += 1
        if self.calls == self.at and self.killed is None:
            workers = sorted(_grandchildren(os.getpid()))
            if workers:
                self.killed = workers[-1]
                os.kill(self.killed, signal.SIGKILL)
        return super().act(batch, slots)


def _grandchildren(pid: int) -> list[int]:
    """The processes whose parent's parent is `pid` (Linux /proc)."""
    from pathlib import Path

    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    children = {p for p, pp in parents.items() if pp == pid}
    return [p for p, pp in parents.items() if pp in children]


def kills_a_worker(ctx: Any) -> _Const:
    """A policy that SIGKILLs one env worker once, between its steps; see `_KillsAWorker`."""
    return _KillsAWorker(ctx)


class _Steer:
    """Steers the fake benchmark's point toward its target at `gain` (no state of its own: a
    deterministic function of the observation, so every way of running gives the same episodes)."""

    def __init__(self, gain: float) -> None:
        self.gain = gain

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        state = np.asarray(batch["observation.environment_state"])  # (rows, 4): x, y, target x, target y
        return np.clip(self.gain * (state[:, 2:4] - state[:, 0:2]), -1.0, 1.0).astype(np.float32)


def steer(ctx: Any = None) -> _Steer:
    """The fake benchmark's point steered to its target (some `far` episodes run out of steps)."""
    return _Steer(5.0)


class _TowardBlock:
    """PushT (--env.obs_type=state): moves the agent to a point beside the block, which turns with
    it; a deterministic function of the observation."""

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        state = np.asarray(batch["observation.state"], dtype=np.float64)  # agent x, y, block x, y, angle
        beside = state[:, 2:4] + 40.0 * np.stack([np.cos(state[:, 4]), np.sin(state[:, 4])], axis=1)
        return np.clip(beside, 0.0, 512.0).astype(np.float32)


def toward_block(ctx: Any = None) -> _TowardBlock:
    return _TowardBlock()
