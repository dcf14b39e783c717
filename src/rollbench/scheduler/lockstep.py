"""Lockstep mode: lerobot-eval's way, task by task, a batch of envs reset together.

A batch of `--eval.batch_size` envs of one task is reset with its units' seeds and
stepped, one policy call over all its rows per step, until every episode in it has ended.
This is the path for policies that cannot keep per-slot state, and the reference the
continuous scheduler is checked against.

Where the envs step (`LockstepOptions.pool`):
- in env worker processes (`LockstepPool`, the default): the continuous scheduler's
  workers in driver placement, so a crashing or hanging env costs only the episodes in
  its worker (retried in a later batch of the task, then failed with the cause) and the
  batch goes on; a finished or lost row keeps its last observation, so the policy still
  sees every row of the batch in the same order;
- in this process (`--eval.isolation=none`, for debugging): a gymnasium vector env,
  finished envs stepped and masked exactly as `lerobot-eval` does.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollbench.config.eval import RecordRule
from rollbench.episode.context import HELD_POLL_S, PolicyWatch, StepContext, stack_any
from rollbench.episode.tracker import Rows
from rollbench.episode.video import Filming, VideoPlan
from rollbench.errors import EpisodesLost
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.results.records import EpisodeRecord
from rollbench.scheduler.pool import PoolOptions, WorkerHandle, WorkerPool, flat_layout, retry_or_fail
from rollbench.scheduler.worker import SlotError
from rollbench.stopping.adaptive import Stops


@dataclass(frozen=True)
class LockstepOptions:
    """How lockstep mode runs its batches (decided once, in `scheduler.decide`)."""

    envs_per_batch: int  # --eval.batch_size: envs of one task reset and stepped together
    use_async_envs: bool = False  # same process: the vector env steps in subprocesses (AsyncVectorEnv)
    max_parallel_tasks: int = 1  # tasks run at once, in threads
    video: VideoPlan | None = None
    pool: PoolOptions | None = None  # set: the envs step in env workers (per task runner); None: here
    record_mode: RecordRule | None = None  # --eval.recording (same-process batches; env workers keep their own)
    #: --eval.step_timeout_s for the policy's calls where no pool brings it (same-process batches); None: unbounded
    step_timeout_s: float | None = None

    @property
    def policy_timeout_s(self) -> float | None:
        """How long one policy call may take before it counts as a hang (`PolicyWatch`)."""
        return self.pool.step_timeout_s if self.pool is not None else self.step_timeout_s


def _by_task(units: Sequence[EpisodeUnit]) -> Iterator[list[EpisodeUnit]]:
    for _, group in itertools.groupby(units, key=lambda u: (u.task_group, u.task_id)):
        yield list(group)


def run_lockstep(
    ctx: StepContext, policy: Policy, units: Sequence[EpisodeUnit], opts: LockstepOptions, stops: Stops | None = None,
) -> Iterator[EpisodeRecord]:
    """Run `units` (in plan order) with `policy`; yield each record as its episode ends.

    The caller owns `policy` (it built it, it closes it). With `max_parallel_tasks` > 1,
    that many tasks run at once in threads, each with its own vector env and its own shallow
    copy of the policy: the weights are shared, the per-episode state is not (a shallow copy
    whose `reset` rebinds its state, as LeRobot's policies do; our adapters key their state
    by slot, and each task gets its own slots). Threads overlap well with async envs, whose
    steps wait on pipes.
    """
    filming = Filming.of(opts.video) if opts.pool is None else None  # env workers film their own episodes
    run = _Lockstep(ctx, opts, filming, stops)
    run.watch = PolicyWatch(opts.policy_timeout_s, ctx, policy)
    if opts.pool is not None:
        run.layout = flat_layout(ctx, {u.task for u in units})
    tasks = list(_by_task(units))
    try:
        with run.watch:
            if opts.max_parallel_tasks <= 1 or len(tasks) <= 1:
                with run.envs(0) as pool:
                    for task_units in tasks:
                        yield from run.task(policy, pool, task_units, 0, None)
            else:
                yield from run.parallel(policy, tasks)
    finally:
        if filming is not None:
            filming.close()


def _startable(stops: Stops | None, head: list[EpisodeUnit]) -> int | None:
    """How many of a task's next units (`head`, in the order of its prefix) the next batch may
    take: all of them, or those an adaptive comparison's pacing lets start (`Stops.ready`). None
    after a short wait when it holds them all: the caller looks again (a stop may have come)."""
    if stops is None or not stops.paces:
        return len(head)
    n = next((i for i, u in enumerate(head) if not stops.ready(u)), len(head))
    if n == 0 and head:
        time.sleep(HELD_POLL_S)
        stops.refresh()  # the other run's episodes may have decided the task: then they go
        return None
    return n


@dataclass
class _Lockstep:
    ctx: StepContext
    opts: LockstepOptions
    filming: Filming | None  # videos of same-process batches (env workers film their own)
    stops: Stops | None = None  # an adaptive run: a batch holds only units still wanted
    layout: Any = None  # env workers: the observation layout of every task
    watch: PolicyWatch = field(default_factory=lambda: PolicyWatch(None))  # bounds each policy call

    @contextlib.contextmanager
    def envs(self, runner: int) -> Iterator[LockstepPool | None]:
        """The env workers of one task runner (None: its envs step in this process)."""
        if self.opts.pool is None:
            yield None
            return
        pool = LockstepPool(self.ctx, self.opts.pool, self.layout, f"t{runner}-" if runner else "")
        pool.stops = self.stops
        pool.watch = self.watch
        try:
            pool.start()
            yield pool
        finally:
            pool.close()

    def task(
        self, policy: Policy, pool: LockstepPool | None, task_units: list[EpisodeUnit], slot_base: int,
        stop: threading.Event | None,
    ) -> Iterator[EpisodeRecord]:
        """One task's units, batch after batch: in env workers, or in one vector env here."""
        n_envs = min(self.opts.envs_per_batch, len(task_units))
        if pool is not None:
            yield from pool.run_task(policy, task_units, n_envs, slot_base, stop)
            return
        vec = self.ctx.benchmark.make_vector_env(task_units[0].task, n_envs, self.opts.use_async_envs)
        left = list(task_units)
        try:
            while left:
                if stop is not None and stop.is_set():
                    return
                if self.stops is not None:  # the batches before may have stopped the task
                    left = [u for u in left if self.stops.wanted(u)]
                n = _startable(self.stops, left[:n_envs])
                if n is None:
                    continue
                chunk, left = left[:n], left[n:]
                if chunk:
                    yield from self.batch(policy, vec, chunk, n_envs, slot_base)
        finally:
            vec.close()

    def parallel(self, policy: Policy, tasks: list[list[EpisodeUnit]]) -> Iterator[EpisodeRecord]:
        out: queue.Queue[tuple[str, Any]] = queue.Queue()
        stop = threading.Event()
        todo = list(enumerate(tasks))
        lock = threading.Lock()

        def runner(number: int) -> None:
            try:
                with self.envs(number) as pool:
                    while not stop.is_set():
                        with lock:
                            if not todo:
                                return
                            index, task_units = todo.pop(0)
                        mine = copy.copy(policy)
                        for record in self.task(mine, pool, task_units, index * self.opts.envs_per_batch, stop):
                            out.put(("record", record))
            except BaseException as err:  # handed to the consumer, which re-raises it
                out.put(("error", err))
                stop.set()

        n_runners = min(self.opts.max_parallel_tasks, len(tasks))
        threads = [threading.Thread(target=runner, args=(k,), daemon=True) for k in range(n_runners)]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads) or not out.empty():
                try:
                    kind, item = out.get(timeout=0.2)
                except queue.Empty:
                    self.watch.check()  # a runner's policy call hung: the run ends here
                    continue
                if kind == "error":
                    raise item
                yield item
        finally:
            stop.set()
            for t in threads:
                while t.is_alive() and not self.watch.stuck(t.ident):  # a hung call never returns: its thread
                    t.join(0.5)  # is left behind (a daemon)

    def batch(
        self, policy: Policy, vec: Any, chunk: list[EpisodeUnit], n_envs: int, slot_base: int,
    ) -> Iterator[EpisodeRecord]:
        """One batch: reset every env with its unit's seed, step until all its episodes ended."""
        ctx = self.ctx
        rows = Rows(ctx.benchmark, vec, chunk, n_envs, self.opts.record_mode, self.filming)
        slots = list(range(slot_base, slot_base + n_envs))
        obs = rows.reset()
        with self.watch.call("reset", lambda: chunk):
            ctx.reset(policy, slots, [ctx.episode_start(u) for u in rows.padded])
        prompts = [ctx.benchmark.policy_task(u.task) for u in rows.padded]
        while rows.active.any():
            with self.watch.call("act", rows.running):
                actions = ctx.act(policy, obs, slots, prompts)
            obs, ended = rows.step(obs, actions)
            for i in ended:
                yield rows.trackers[i].record(worker="main")


@dataclass
class _Row:
    """One row of a batch run by env workers: its unit, where it runs, its last observation."""

    unit: EpisodeUnit
    attempt: int
    worker: int
    slot: int
    state: str = "resetting"  # resetting | running | over
    obs: Any = None


class LockstepPool(WorkerPool):
    """Lockstep batches whose envs step in env workers (driver placement).

    Row j of a batch runs in worker j % P, slot j // P, so a batch's envs are spread over
    all workers and step in parallel. A row whose episode ended, failed or was lost with
    its worker keeps its last observation in the batch; lost and failed units go to a
    later batch of the same task (`run_task`), after its other batches.
    """

    stops: Stops | None = None  # an adaptive run: a batch holds only units still wanted
    watch: PolicyWatch = PolicyWatch(None)  # bounds each policy call (`_Lockstep.envs` gives the run's)

    def run_task(
        self, policy: Policy, units: list[EpisodeUnit], n_envs: int, slot_base: int, stop: threading.Event | None,
    ) -> Iterator[EpisodeRecord]:
        todo: deque[tuple[EpisodeUnit, int]] = deque((u, 0) for u in units)
        while todo:
            if stop is not None and stop.is_set():
                return
            if self.stops is not None:  # the batches before may have stopped the task
                todo = deque(item for item in todo if self.stops.wanted(item[0]))
                if not todo:
                    break
            n = _startable(self.stops, [u for u, _ in itertools.islice(todo, n_envs)])
            if n is None:
                continue
            chunk = [todo.popleft() for _ in range(n)]
            again: list[tuple[EpisodeUnit, int]] = []
            yield from self._batch(policy, chunk, n_envs, slot_base, again)
            todo.extend(again)
        for w in self.workers:
            self.send(w, ("close_task", units[0].task))

    def _batch(
        self, policy: Policy, chunk: list[tuple[EpisodeUnit, int]], n_envs: int, slot_base: int,
        again: list[tuple[EpisodeUnit, int]],
    ) -> Iterator[EpisodeRecord]:
        ctx, n_workers = self.ctx, len(self.workers)
        rows = [_Row(u, a, j % n_workers, j // n_workers) for j, (u, a) in enumerate(chunk)]
        where = {(r.worker, r.slot): r for r in rows}
        for w in self.workers:
            mine = [r for r in rows if r.worker == w.index]
            if not mine:
                continue
            for r in mine:
                w.slots[r.slot].append((r.unit, r.attempt))
            self.send(w, ("assign", [(r.slot, r.unit, r.attempt) for r in mine]))
            self._step(w, {})
        yield from self._collect(where, again)
        first = chunk[0][0]
        slots = list(range(slot_base, slot_base + n_envs))
        with self.watch.call("reset", lambda: [r.unit for r in rows if r.state == "running"]):
            ctx.reset(policy, slots, [ctx.episode_start(r.unit) for r in rows] + [ctx.episode_start(first)] * (n_envs - len(rows)))
        prompts = [ctx.benchmark.policy_task(first.task)] * n_envs
        while any(r.state == "running" for r in rows):
            filler = next(r.obs for r in rows if r.obs is not None)
            lead = rows[0].obs if rows[0].obs is not None else filler
            # a short batch is padded to its shape with the first row's observation
            obs = [r.obs if r.obs is not None else filler for r in rows] + [lead] * (n_envs - len(rows))
            try:
                with self.watch.call("act", lambda: [r.unit for r in rows if r.state == "running"]):
                    actions = ctx.act(policy, stack_any(obs), slots, prompts)
            except EpisodesLost as lost:
                # the policy's state is the batch's: every running row starts again, later
                for w in self.workers:
                    ended = [(r.slot, str(lost)) for r in rows if r.worker == w.index and r.state == "running"]
                    if ended:
                        self.send(w, ("abandon", ended))
                        self._step(w, {})
                yield from self._collect(where, again)
                return
            for w in self.workers:
                step = {r.slot: actions[j] for j, r in enumerate(rows) if r.worker == w.index and r.state == "running"}
                if step:
                    self._step(w, step)
            yield from self._collect(where, again)

    def _step(self, w: WorkerHandle, actions: dict[int, Any]) -> None:
        self.send(w, ("step", actions))
        w.inflight = True

    def _collect(self, where: dict[tuple[int, int], _Row], again: list[tuple[EpisodeUnit, int]]) -> Iterator[EpisodeRecord]:
        """Wait for every worker in flight; account what happened to each row."""
        while True:
            waiting = [w for w in self.workers if w.inflight]
            if not waiting:
                return
            for w, msg in self.receive(waiting, timeout=0.5):
                if msg[0] == "stepped":
                    w.inflight = False
                    w.reported = True
                    yield from self._absorb(w, msg[1], where, again)
                elif msg[0] == "fatal":
                    self.fatal(msg)
                elif msg[0] == "lost":
                    loss = self.bury(w, msg[1])
                    for slot, unit, attempt in loss.charged:
                        where[(w.index, slot)].state = "over"
                        yield from self._retry(unit, attempt, loss.error(unit), f"w{w.index}", again)
                    for slot, unit, attempt in loss.interrupted:
                        where[(w.index, slot)].state = "over"
                        again.append((unit, attempt))

    def _absorb(
        self, w: WorkerHandle, report: Any, where: dict[tuple[int, int], _Row], again: list[tuple[EpisodeUnit, int]],
    ) -> Iterator[EpisodeRecord]:
        for event in report.events:
            if event[0] == "started":
                w.started[event[1]] = True
                where[(w.index, event[1])].state = "running"
            elif event[0] == "record":
                slot, record = event[1], event[2]
                unit, _ = w.slots[slot].popleft()
                assert unit.key == record.key, (unit.key, record.key)
                w.started[slot] = False
                where[(w.index, slot)].state = "over"
                self.ended(w)
                yield record
            else:
                err: SlotError = event[1]
                unit, attempt = w.slots[err.slot].popleft()
                w.started[err.slot] = False
                where[(w.index, err.slot)].state = "over"
                self.ended(w)
                error = f"error in worker {w.index} on {unit.label()}: {err.error}"
                yield from self._retry(unit, attempt, error, f"w{w.index}", again)
        running = [slot for slot in report.running if where.get((w.index, slot)) is not None]
        if not running:
            return
        if self.layout is not None:
            data = w.buffer.read(running)
            for n, slot in enumerate(running):
                where[(w.index, slot)].obs = {k: v[n] for k, v in data.items()} if isinstance(data, dict) else data[n]
        else:
            for slot in running:
                where[(w.index, slot)].obs = report.obs[slot]

    def _retry(
        self, unit: EpisodeUnit, attempt: int, error: str, worker: str, again: list[tuple[EpisodeUnit, int]],
    ) -> Iterator[EpisodeRecord]:
        return retry_or_fail(unit, attempt, self.opts.max_retries, error, worker, lambda u, a: again.append((u, a)))
