"""Continuous batching: every slot resets into its next unit the moment its episode ends.

    driver                                   worker i (process, K slots)
    ------                                   ---------------------------
    UnitQueue --assign(slot, unit)-->        slot queue -> reset(seed) -> step ... -> record
    policy.act(batch of ready slots) --step--> env.step for each slot; obs -> shared memory
    <-- report(records, errors, started) --  (worker placement: the policy runs in the worker,
                                              no round trip per step)

Driver placement keeps two groups of workers in flight: while one group steps its envs,
the driver runs inference for the other. A worker that dies or stops making progress for
`step_timeout_s` is replaced; the units in its slots are retried up to `max_retries` times
and then recorded as failed, with the worker's last stderr lines. Everything else about
an episode (its seed, its bookkeeping) is the same code as lockstep mode, so per-episode
results do not depend on the mode, worker count or slot count.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.errors import ConfigError, PolicyError, WorkerError
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.results.records import EpisodeRecord
from rollbench.rollout import VideoPlan
from rollbench.scheduler.common import StepContext, cpu_count, driver_threads
from rollbench.scheduler.shm import ArraySpec, SlotBuffer, obs_layout, shm_dir, stack_any
from rollbench.scheduler.worker import Report, SlotError, WorkerSpec, worker_main

STDERR_TAIL_LINES = 15
#: a worker that dies this many times in a row without reporting anything stops the run
MAX_FRUITLESS_RESTARTS = 3


@dataclass(frozen=True)
class PoolOptions:
    """How continuous mode runs (decided once, in `scheduler.decide`): the pool starts
    exactly `workers` worker processes."""

    workers: int
    slots_per_worker: int
    placement: str  # "worker" or "driver"
    max_retries: int
    step_timeout_s: float
    log_dir: Path
    gl_backend: str  # MUJOCO_GL of every worker
    video: VideoPlan | None = None
    max_rows_per_call: int | None = None  # driver placement: --policy.max_batch_size


class UnitQueue:
    """Pending units by task, in plan order; retried units go first."""

    def __init__(self, units: list[EpisodeUnit]) -> None:
        self.by_task: OrderedDict[str, deque[tuple[EpisodeUnit, int]]] = OrderedDict()
        for u in units:
            self.by_task.setdefault(u.task, deque()).append((u, 0))
        self.n = len(units)

    def __len__(self) -> int:
        return self.n

    def take(self, prefer: str | None, avoid: set[str] | frozenset[str] = frozenset()) -> tuple[EpisodeUnit, int] | None:
        """The next unit for a slot.

        Task affinity: a unit of `prefer` (the task whose env the slot already holds) while
        any is left; otherwise the biggest task nobody else is on (`avoid`), so that each
        task's env gets built in as few workers as possible; otherwise the biggest task.
        """
        if not self.n:
            return None
        q = self.by_task.get(prefer) if prefer is not None else None
        if not q:
            fresh = [d for t, d in self.by_task.items() if d and t not in avoid]
            q = max(fresh or self.by_task.values(), key=len)
        self.n -= 1
        return q.popleft()

    def retry(self, unit: EpisodeUnit, attempt: int) -> None:
        self.by_task.setdefault(unit.task, deque()).appendleft((unit, attempt))
        self.n += 1

    def has(self, task: str) -> bool:
        return bool(self.by_task.get(task))


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

    def __post_init__(self) -> None:
        self.last_task = [None] * len(self.slots)

    def busy(self) -> bool:
        return any(self.slots)

    def running(self) -> list[int]:
        return [i for i, s in enumerate(self.started) if s]


def _tail(path: Path, n: int = STDERR_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _rows(batch: Any, lo: int, hi: int) -> Any:
    if isinstance(batch, dict):
        return {k: _rows(v, lo, hi) for k, v in batch.items()}
    return batch[lo:hi]


def _concat(parts: list[Any]) -> Any:
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)


class ContinuousScheduler:
    def __init__(self, ctx: StepContext, units: list[EpisodeUnit], opts: PoolOptions, policy: Policy | None) -> None:
        if (opts.placement == "driver") != (policy is not None):
            raise ValueError("continuous scheduler: driver placement takes the driver's policy, worker placement none")
        self.ctx = ctx
        self.opts = opts
        self.queue = UnitQueue(units)
        self.n_slots_total = opts.workers * opts.slots_per_worker
        self.layout = self._layout(units)
        self.policy = policy
        self.mpctx: Any = mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")
        self.run_id = f"rollbench-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
        self.workers: list[WorkerHandle] = []
        self.open_tasks = {u.task for u in units}
        self.fruitless = [0] * opts.workers  # deaths in a row of a worker that never reported

    def _layout(self, units: list[EpisodeUnit]) -> tuple[ArraySpec, ...] | None:
        """One flat observation layout for all tasks, or None (observations get pickled)."""
        layouts = set()
        for task in {u.task for u in units}:
            env = self.ctx.benchmark.make_task_env(task)
            try:
                layouts.add(obs_layout(env.observation_space))
            finally:
                env.close()
        return layouts.pop() if len(layouts) == 1 else None

    # -- pool ------------------------------------------------------------------------
    def _spawn(self, index: int, buffer: SlotBuffer | None = None) -> WorkerHandle:
        k = self.opts.slots_per_worker
        path = os.path.join(shm_dir(), f"{self.run_id}-w{index}.buf")
        if buffer is None:
            buffer = SlotBuffer(self.layout, k, path, create=True)
        log_path = self.opts.log_dir / f"worker-{index}.log"
        spec = WorkerSpec(
            index=index, n_slots=k, benchmark=self.ctx.benchmark,
            policy=self.ctx.policy_config if self.opts.placement == "worker" else None,
            layout=self.layout, buffer_path=path, log_path=str(log_path), gl_backend=self.opts.gl_backend,
            video=self.opts.video,
        )
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"--- worker {index} starting at {time.strftime('%H:%M:%S')} ---\n")
        parent, child = self.mpctx.Pipe()
        buffer.touch()
        proc = self.mpctx.Process(target=worker_main, args=(child, spec), name=f"rollbench-worker-{index}", daemon=True)
        proc.start()
        child.close()
        return WorkerHandle(index, proc, parent, buffer, log_path, [deque() for _ in range(k)], [False] * k)

    def _stop(self, w: WorkerHandle, kill: bool = False) -> None:
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
            self._stop(w)
            w.buffer.close(unlink=True)

    # -- bookkeeping -----------------------------------------------------------------
    def _fill(self, w: WorkerHandle) -> None:
        """Top up w's slots (current + one prefetched while work is plentiful) and send."""
        depth = 2 if len(self.queue) >= self.n_slots_total else 1
        if not len(self.queue) or all(len(q) >= depth for q in w.slots):
            return
        assigned = []
        busy_elsewhere = self._busy_elsewhere(w)
        for i, q in enumerate(w.slots):
            while len(q) < depth:
                item = self._take_into(w, i, busy_elsewhere)
                if item is None:
                    break
                assigned.append(item)
        if assigned:
            self._send(w, ("assign", assigned))

    def _busy_elsewhere(self, w: WorkerHandle) -> set[str]:
        """Tasks the other workers' slots are running."""
        return {q[0][0].task for o in self.workers if o is not w for q in o.slots if q}

    def _take_into(self, w: WorkerHandle, i: int, busy_elsewhere: set[str]) -> tuple[Any, ...] | None:
        """Queue the next unit for w's slot i (task affinity); the `assign` entry, or None."""
        q = w.slots[i]
        item = self.queue.take(q[-1][0].task if q else w.last_task[i], busy_elsewhere)
        if item is None:
            return None
        q.append(item)
        w.last_task[i] = item[0].task
        return (i, *item)

    def _fill_all(self) -> None:
        """The first assignment: slot by slot, across the workers in turn, then the prefetch.

        Filling one worker after the other gives the first worker the plan's first units,
        which are the ones rendered into videos: that worker then runs the longest.
        """
        depth = 2 if len(self.queue) >= self.n_slots_total else 1
        assigned: dict[int, list[tuple[Any, ...]]] = {w.index: [] for w in self.workers}
        for level in range(1, depth + 1):
            for i in range(self.opts.slots_per_worker):
                for w in self.workers:
                    if len(w.slots[i]) < level and len(self.queue):
                        item = self._take_into(w, i, self._busy_elsewhere(w))
                        assert item is not None
                        assigned[w.index].append(item)
        for w in self.workers:
            if assigned[w.index]:
                self._send(w, ("assign", assigned[w.index]))

    def _give_up_or_retry(self, unit: EpisodeUnit, attempt: int, error: str, worker: str) -> Iterator[EpisodeRecord]:
        if attempt < self.opts.max_retries:
            self.queue.retry(unit, attempt + 1)
        else:
            yield EpisodeRecord.failed(unit, error, worker, attempt, 0.0)

    def _absorb(self, w: WorkerHandle, report: Report) -> Iterator[EpisodeRecord]:
        w.reported = True
        ended = False
        for event in report.events:
            if event[0] == "started":
                w.started[event[1]] = True
            elif event[0] == "record":
                i, rec = event[1], event[2]
                unit, _ = w.slots[i].popleft()
                assert unit.key == rec.key, (unit.key, rec.key)
                w.started[i] = False
                ended = True
                yield rec
            else:
                ended = True
                yield from self._slot_error(w, event[1])
        started = [(i, u) for i, u in report.started() if w.started[i] and w.slots[i] and w.slots[i][0][0] == u]
        if started and self.policy is not None:
            k = self.opts.slots_per_worker
            self.policy.reset([w.index * k + i for i, _ in started], [self.ctx.episode_start(u) for _, u in started])
        if ended:
            self._close_finished_tasks()

    def _slot_error(self, w: WorkerHandle, err: SlotError) -> Iterator[EpisodeRecord]:
        unit, attempt = w.slots[err.slot].popleft()
        assert unit.key == err.unit.key
        w.started[err.slot] = False
        yield from self._give_up_or_retry(unit, attempt, f"error in worker {w.index} on {unit.label()}: {err.error}", f"w{w.index}")

    def _lost(self, w: WorkerHandle, why: str) -> Iterator[EpisodeRecord]:
        """Worker w is gone (died or hung): retry or fail its units, start a fresh worker.

        The worker marks in shared memory which slot it is inside a reset or step of, so the
        unit that killed (or hung) it is known: that unit uses up one of its retries, while
        the other episodes it interrupted are simply run again. When the worker died outside
        any env call, every episode it was running counts the attempt.
        """
        inside = int(w.buffer.current[0])
        self._stop(w, kill=True)
        code = w.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        tail = _tail(w.log_path)
        blamed = any(n == 0 and (i == inside or (inside < 0 and w.started[i])) for i, q in enumerate(w.slots) for n in range(len(q)))
        self.fruitless[w.index] = 0 if blamed or w.reported else self.fruitless[w.index] + 1
        if self.fruitless[w.index] > MAX_FRUITLESS_RESTARTS:
            # it dies before any episode starts (a broken import, a missing library): a fresh
            # process would die the same way, forever, and no unit would ever be charged
            raise WorkerError(
                f"worker {w.index} {why or how} {self.fruitless[w.index]} times in a row before running any episode; "
                f"last lines of {w.log_path}:\n{tail or '(empty)'}"
            )
        for i, q in enumerate(w.slots):
            for n, (unit, attempt) in enumerate(q):
                culprit = n == 0 and (i == inside or (inside < 0 and w.started[i]))
                if culprit:
                    error = f"worker {w.index} (pid {w.process.pid}) {why or how} while running {unit.label()}"
                    if tail:
                        error += f"; last stderr lines:\n{tail}"
                    yield from self._give_up_or_retry(unit, attempt, error, f"w{w.index}")
                else:
                    self.queue.retry(unit, attempt)
        fresh = self._spawn(w.index, w.buffer)
        self.workers[w.index] = fresh

    def _close_finished_tasks(self) -> None:
        for task in list(self.open_tasks):
            if self.queue.has(task) or any(u.task == task for w in self.workers for q in w.slots for u, _ in q):
                continue
            self.open_tasks.discard(task)
            for w in self.workers:
                self._send(w, ("close_task", task))

    def _done(self) -> bool:
        return not len(self.queue) and not any(w.busy() for w in self.workers)

    def _hung(self, w: WorkerHandle, now: float) -> bool:
        # driver placement: only a worker we await can hang; worker placement: any with work
        expecting = w.inflight if self.opts.placement == "driver" else w.busy()
        last = max(float(w.buffer.beat[0]), w.sent_at)
        return expecting and now - last > self.opts.step_timeout_s

    def _receive(self, candidates: list[WorkerHandle], timeout: float) -> Iterator[tuple[WorkerHandle, Any]]:
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
            if self.workers[w.index] is w and self._hung(w, now):
                yield w, ("lost", f"made no progress for {self.opts.step_timeout_s:g}s (--eval.step_timeout_s; hang)")

    def _fatal(self, msg: tuple[Any, ...]) -> None:
        text, kind = msg[1], msg[2]
        cls = {"PolicyError": PolicyError, "ConfigError": ConfigError}.get(kind, WorkerError)
        raise cls(text)

    # -- the two driving loops -------------------------------------------------------
    def run(self) -> Iterator[EpisodeRecord]:
        self.opts.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            # one BLAS/OpenMP thread per worker: N workers with a full pool each oversubscribe
            # the cores (the forkserver, started by the first spawn, passes this on)
            prev = os.environ.get("OMP_NUM_THREADS")
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            try:
                self.workers = [self._spawn(i) for i in range(self.opts.workers)]
            finally:
                if prev is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
            if self.opts.placement == "worker":
                yield from self._run_worker_placement()
            else:
                with _torch_threads(driver_threads(cpu_count(), self.opts.workers)):
                    yield from self._run_driver_placement()
        finally:
            self.close()

    def _run_worker_placement(self) -> Iterator[EpisodeRecord]:
        self._fill_all()
        while not self._done():
            for w, msg in self._receive(list(self.workers), timeout=0.5):
                if msg[0] == "report":
                    yield from self._absorb(w, msg[1])
                elif msg[0] == "fatal":
                    self._fatal(msg)
                elif msg[0] == "lost":
                    yield from self._lost(w, msg[1])
                    w = self.workers[w.index]
                self._fill(w)

    def _run_driver_placement(self) -> Iterator[EpisodeRecord]:
        n = len(self.workers)
        groups = [list(range(0, n, 2)), list(range(1, n, 2))] if n >= 2 else [[0]]
        self._fill_all()
        for w in self.workers:
            self._send_step(w, {})
        while not self._done():
            for group in groups:
                yield from self._collect(group)
                self._infer_and_send([self.workers[i] for i in group])

    def _send_step(self, w: WorkerHandle, actions: dict[int, Any]) -> None:
        self._fill(w)
        if actions or any(w.slots):
            self._send(w, ("step", actions))
            w.inflight = True

    def _send(self, w: WorkerHandle, msg: tuple[Any, ...]) -> None:
        """Send; a dead worker's pipe is noticed through its sentinel, and its units requeued."""
        try:
            w.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        w.sent_at = time.monotonic()

    def _collect(self, group: list[int]) -> Iterator[EpisodeRecord]:
        """Wait for the replies of the group's in-flight workers."""
        self._obs: dict[int, Any] = {}
        while True:
            waiting = [self.workers[i] for i in group if self.workers[i].inflight]
            if not waiting:
                return
            for w, msg in self._receive(waiting, timeout=0.5):
                if msg[0] == "stepped":
                    w.inflight = False
                    if msg[1].obs is not None:
                        self._obs[w.index] = msg[1].obs
                    yield from self._absorb(w, msg[1])
                elif msg[0] == "fatal":
                    self._fatal(msg)
                elif msg[0] == "lost":
                    yield from self._lost(w, msg[1])
                    self._send_step(self.workers[w.index], {})

    def _infer_and_send(self, group: list[WorkerHandle]) -> None:
        assert self.policy is not None
        k = self.opts.slots_per_worker
        parts, slots, descriptions, owners = [], [], [], []
        for w in group:
            running = w.running()
            if not running:
                continue
            if self.layout is not None:
                parts.append(w.buffer.read(running))
            else:
                parts.extend(self._obs[w.index][i] for i in running)
            for i in running:
                slots.append(w.index * k + i)
                descriptions.append(self.ctx.benchmark.task_description(w.slots[i][0][0].task))
                owners.append((w, i))
        actions: dict[int, dict[int, Any]] = {w.index: {} for w in group}
        if slots:
            batch = _concat(parts) if self.layout is not None else stack_any(parts)
            bound = self.opts.max_rows_per_call or len(slots)
            outs = []
            for lo in range(0, len(slots), bound):  # --policy.max_batch_size bounds a call (e.g. GPU memory)
                part = batch if bound >= len(slots) else _rows(batch, lo, lo + bound)
                outs.append(self.ctx.act(self.policy, part, slots[lo : lo + bound], descriptions[lo : lo + bound]))
            out = outs[0] if len(outs) == 1 else np.concatenate(outs)
            for (w, i), a in zip(owners, out, strict=True):
                actions[w.index][i] = a
        for w in group:
            self._send_step(w, actions[w.index])


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """At most `n` torch intra-op threads in this process while the block runs.

    Driver placement: the workers keep the cores busy with envs while the driver runs the
    policy, so torch's default pool (one thread per core) only fights them; its OpenMP
    threads also spin while they wait. On 2 cores with 2 workers (PushT pixels, LeRobot ACT,
    a loaded machine) the driver burnt 109 s of CPU with 2 threads and 11 s with 1, and the
    run took 138 s instead of 32 s. A user's $OMP_NUM_THREADS (or a smaller pool) is kept.
    """
    torch = sys.modules.get("torch")  # a policy that uses torch has imported it by now
    if torch is None or os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads() <= n:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_continuous(
    ctx: StepContext, units: list[EpisodeUnit], opts: PoolOptions, policy: Policy | None = None,
) -> Iterator[EpisodeRecord]:
    """Run `units` on a pool of `opts.workers` workers; yield each record as its episode ends.

    Driver placement runs `policy` (the caller's: it built it, it closes it) in this process;
    worker placement builds one policy in every worker and takes none here.
    """
    if not units:
        return iter(())
    return ContinuousScheduler(ctx, units, opts, policy).run()
