"""A pool of env worker processes: start, talk to, watch, bury and replace them.

Both schedulers drive their envs through one: continuous mode keeps every slot busy,
lockstep mode steps a batch's envs in it (`scheduler/lockstep.py`). The pool knows which
units sit in which slot of which worker (`WorkerHandle.slots`), notices a worker that
died (its process sentinel, a broken pipe) or stopped making progress (its heartbeat in
shared memory), and on a loss says which unit was to blame (`Loss`); what happens to the
units then is the scheduler's business.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from rollbench.config.eval import RecordRule
from rollbench.errors import ConfigError, PolicyError, WorkerError
from rollbench.plan import EpisodeUnit
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import pid_alive
from rollbench.rollout import VideoPlan
from rollbench.scheduler.common import StepContext
from rollbench.scheduler.shm import ArraySpec, SlotBuffer, obs_layout, shm_dir
from rollbench.scheduler.worker import WorkerSpec, worker_main

STDERR_TAIL_LINES = 15
#: a worker that dies this many times in a row without reporting anything stops the run
MAX_FRUITLESS_RESTARTS = 3


@dataclass(frozen=True)
class PoolOptions:
    """How the pool runs (decided once, in `scheduler.decide`): it starts exactly
    `workers` worker processes of `slots_per_worker` slots."""

    workers: int
    slots_per_worker: int
    placement: str  # "worker" or "driver"
    max_retries: int
    step_timeout_s: float
    log_dir: Path
    gl_backend: str  # MUJOCO_GL of every worker
    video: VideoPlan | None = None
    max_rows_per_call: int | None = None  # driver placement: --policy.max_batch_size
    record_mode: RecordRule | None = None  # --eval.recording: whose frames the workers keep
    driver_threads: int | None = None  # torch threads of this process while it drives (None: as they are)
    worker_threads: int = 1  # OpenMP and torch threads of each worker


@dataclass
class WorkerHandle:
    index: int
    process: Any
    conn: Any
    buffer: SlotBuffer
    log_path: Path
    slots: list[deque[tuple[EpisodeUnit, int]]]
    started: list[bool]
    inflight: bool = False
    reported: bool = False  # it has sent a report: it got as far as running slots
    sent_at: float = field(default_factory=time.monotonic)
    last_task: list[str | None] = field(default_factory=list)
    policy_calls: tuple[int, int] = (0, 0)  # worker placement: its (calls, rows) counted so far

    def __post_init__(self) -> None:
        self.last_task = [None] * len(self.slots)

    def busy(self) -> bool:
        return any(self.slots)

    def running(self) -> list[int]:
        return [i for i, s in enumerate(self.started) if s]


@dataclass
class Loss:
    """What a dead or hung worker took with it: `charged` units were inside it (each uses
    up an attempt; `error` says why), `interrupted` ones just run again."""

    worker: WorkerHandle
    error: Callable[[EpisodeUnit], str]
    charged: list[tuple[int, EpisodeUnit, int]]  # (slot, unit, attempt)
    interrupted: list[tuple[int, EpisodeUnit, int]]


def retry_or_fail(
    unit: EpisodeUnit, attempt: int, max_retries: int, error: str, worker: str,
    requeue: Callable[[EpisodeUnit, int], None],
) -> Iterator[EpisodeRecord]:
    """A unit that failed on its `attempt`: `requeue(unit, attempt + 1)` while retries are
    left (--eval.max_retries), else its `failed` record, with the cause."""
    if attempt < max_retries:
        requeue(unit, attempt + 1)
    else:
        yield EpisodeRecord.failed(unit, error, worker, attempt, 0.0)


def tail(path: Path, n: int = STDERR_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def flat_layout(ctx: StepContext, tasks: set[str]) -> tuple[ArraySpec, ...] | None:
    """One flat observation layout for all `tasks`, or None (observations get pickled)."""
    layouts = set()
    for task in tasks:
        env = ctx.benchmark.make_task_env(task)
        try:
            layouts.add(obs_layout(env.observation_space))
        finally:
            env.close()
    return layouts.pop() if len(layouts) == 1 else None


def sweep_shm() -> int:
    """Remove the shared-memory files of runs whose driver is gone (a SIGKILL of the whole
    process group leaves its workers' files in /dev/shm); the number removed."""
    removed = 0
    for path in Path(shm_dir()).glob("rollbench-*-*.buf"):
        pid = path.name.split("-")[1]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed


class WorkerPool:
    """`opts.workers` worker processes; `tag` keeps the logs and shared memory of pools
    that run side by side apart (lockstep's parallel tasks)."""

    def __init__(self, ctx: StepContext, opts: PoolOptions, layout: tuple[ArraySpec, ...] | None, tag: str = "") -> None:
        self.ctx = ctx
        self.opts = opts
        self.layout = layout
        self.tag = tag
        self.mpctx: Any = mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")
        self.run_id = f"rollbench-{os.getpid()}-{int(time.time() * 1000) % 10**8}{tag}"
        self.workers: list[WorkerHandle] = []
        self.fruitless = [0] * opts.workers  # deaths in a row of a worker that never reported

    # -- processes -------------------------------------------------------------------
    def start(self) -> None:
        self.opts.log_dir.mkdir(parents=True, exist_ok=True)
        sweep_shm()
        # one BLAS/OpenMP thread per worker (`worker_threads`): N workers with a full pool each
        # oversubscribe the cores. Each worker sets it again from its spec; the forkserver,
        # started by the first spawn, passes this on to what loads before that
        prev = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(self.opts.worker_threads)
        try:
            self.workers = [self.spawn(i) for i in range(self.opts.workers)]
        finally:
            if prev is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = prev

    def spawn(self, index: int, buffer: SlotBuffer | None = None) -> WorkerHandle:
        k = self.opts.slots_per_worker
        path = os.path.join(shm_dir(), f"{self.run_id}-w{index}.buf")
        if buffer is None:
            buffer = SlotBuffer(self.layout, k, path, create=True)
        log_path = self.opts.log_dir / f"worker-{self.tag}{index}.log"
        spec = WorkerSpec(
            index=index, n_slots=k, benchmark=self.ctx.benchmark,
            policy=self.ctx.policy_config if self.opts.placement == "worker" else None,
            layout=self.layout, buffer_path=path, log_path=str(log_path), gl_backend=self.opts.gl_backend,
            video=self.opts.video, record_mode=self.opts.record_mode, threads=self.opts.worker_threads,
            paraphrases=self.ctx.paraphrases,
        )
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"--- worker {index} starting at {time.strftime('%H:%M:%S')} ---\n")
        parent, child = self.mpctx.Pipe()
        buffer.touch()
        proc = self.mpctx.Process(target=worker_main, args=(child, spec), name=f"rollbench-worker-{self.tag}{index}", daemon=True)
        proc.start()
        child.close()
        return WorkerHandle(index, proc, parent, buffer, log_path, [deque() for _ in range(k)], [False] * k)

    def stop(self, w: WorkerHandle, kill: bool = False) -> None:
        if not kill:
            try:
                w.conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            w.process.join(timeout=120)  # a worker finishes encoding its videos before it exits
        if w.process.is_alive():
            w.process.kill()
            w.process.join(timeout=5)
        w.conn.close()

    def close(self) -> None:
        for w in self.workers:
            self.stop(w)
            w.buffer.close(unlink=True)

    # -- messages --------------------------------------------------------------------
    def send(self, w: WorkerHandle, msg: tuple[Any, ...]) -> None:
        """Send; a dead worker's pipe is noticed through its sentinel, and its units requeued."""
        try:
            w.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        w.sent_at = time.monotonic()

    def expecting(self, w: WorkerHandle) -> bool:
        """Whether w owes us a sign of life (driver placement: only a worker we await)."""
        return w.inflight if self.opts.placement == "driver" else w.busy()

    def hung(self, w: WorkerHandle, now: float) -> bool:
        last = max(float(w.buffer.beat[0]), w.sent_at)
        return self.expecting(w) and now - last > self.opts.step_timeout_s

    def receive(self, candidates: list[WorkerHandle], timeout: float) -> Iterator[tuple[WorkerHandle, Any]]:
        """Messages from `candidates` (or ("lost", why) events) that arrive within `timeout`."""
        by_obj: dict[Any, WorkerHandle] = {}  # connections and process sentinels
        for w in candidates:
            by_obj[w.conn] = w
            by_obj[w.process.sentinel] = w
        ready: list[Any] = wait(list(by_obj), timeout=timeout)
        for obj in ready:
            w = by_obj[obj]
            if self.workers[w.index] is not w:
                continue  # already replaced in this round
            if obj is w.conn:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    yield w, ("lost", "")
                    continue
                yield w, msg
            elif not w.conn.poll():
                yield w, ("lost", "")
        now = time.monotonic()
        for w in candidates:
            if self.workers[w.index] is w and self.hung(w, now):
                yield w, ("lost", f"made no progress for {self.opts.step_timeout_s:g}s (--eval.step_timeout_s; hang)")

    @staticmethod
    def fatal(msg: tuple[Any, ...]) -> None:
        text, kind = msg[1], msg[2]
        cls = {"PolicyError": PolicyError, "ConfigError": ConfigError}.get(kind, WorkerError)
        raise cls(text)

    # -- losses ----------------------------------------------------------------------
    def bury(self, w: WorkerHandle, why: str) -> Loss:
        """Worker w is gone (died or hung): kill what is left of it, start a fresh one in
        its place, and say which of its units were to blame.

        The worker marks in shared memory which slot it is inside a reset or step of, so the
        unit that killed (or hung) it is known: that unit is charged, while the other
        episodes it interrupted are simply run again. When the worker died outside any env
        call, every episode it was running is charged.
        """
        inside = int(w.buffer.current[0])
        self.stop(w, kill=True)
        code = w.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        text = tail(w.log_path)
        charged: list[tuple[int, EpisodeUnit, int]] = []
        interrupted: list[tuple[int, EpisodeUnit, int]] = []
        for i, q in enumerate(w.slots):
            for n, (unit, attempt) in enumerate(q):
                culprit = n == 0 and (i == inside or (inside < 0 and w.started[i]))
                (charged if culprit else interrupted).append((i, unit, attempt))
        if charged or w.reported:
            self.fruitless[w.index] = 0
        elif w.busy():  # it had work and died before reporting on any of it
            self.fruitless[w.index] += 1
        # (an idle worker that dies, e.g. a replacement waiting for lockstep's next batch and
        # killed from outside, says nothing about whether a fresh one can run episodes)
        if self.fruitless[w.index] > MAX_FRUITLESS_RESTARTS:
            # it dies before any episode starts (a broken import, a missing library): a fresh
            # process would die the same way, forever, and no unit would ever be charged
            raise WorkerError(
                f"worker {w.index} {why or how} {self.fruitless[w.index]} times in a row before running any episode; "
                f"last lines of {w.log_path}:\n{text or '(empty)'}"
            )
        pid = w.process.pid

        def error(unit: EpisodeUnit) -> str:
            out = f"worker {w.index} (pid {pid}) {why or how} while running {unit.label()}"
            return out + (f"; last stderr lines:\n{text}" if text else "")

        self.workers[w.index] = self.spawn(w.index, w.buffer)
        return Loss(w, error, charged, interrupted)
