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
import functools
import os
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rollbench.episode.context import HELD_POLL_S, PolicyWatch, StepContext, act_surviving, stack_any
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import Policy
from rollbench.results.records import EpisodeRecord
from rollbench.scheduler.pool import PoolOptions, Transport, WorkerHandle, WorkerPool, flat_layout, retry_or_fail
from rollbench.scheduler.worker import Report, SlotError
from rollbench.stopping.adaptive import Stops

__all__ = ["ContinuousScheduler", "PoolOptions", "UnitQueue", "run_continuous"]


class UnitQueue:
    """Pending units by task, in plan order; retried units go first."""

    def __init__(self, units: list[EpisodeUnit]) -> None:
        self.by_task: OrderedDict[str, deque[tuple[EpisodeUnit, int]]] = OrderedDict()
        for u in units:
            self.by_task.setdefault(u.task, deque()).append((u, 0))
        self.n = len(units)

    def __len__(self) -> int:
        return self.n

    def take(
        self, prefer: str | None, avoid: set[str] | frozenset[str] = frozenset(),
        ready: Callable[[EpisodeUnit], bool] | None = None,
    ) -> tuple[EpisodeUnit, int] | None:
        """The next unit for a slot; None when none is left, or none is `ready` to start.

        Task affinity: a unit of `prefer` (the task whose env the slot already holds) while
        any is left; otherwise the biggest task nobody else is on (`avoid`), so that each
        task's env gets built in as few workers as possible; otherwise the biggest task.
        `ready` (an adaptive comparison's pacing) is asked of each task's next unit only: a
        task's units come in the order of its prefix, so one held back holds those after it.
        """
        if not self.n:
            return None

        def open_(d: deque[tuple[EpisodeUnit, int]] | None) -> bool:
            return d is not None and bool(d) and (ready is None or ready(d[0][0]))

        q = self.by_task.get(prefer) if prefer is not None else None
        if not open_(q):
            candidates = [(t, d) for t, d in self.by_task.items() if open_(d)]
            if not candidates:
                return None
            fresh = [d for t, d in candidates if t not in avoid]
            q = max(fresh or [d for _, d in candidates], key=len)
        assert q is not None
        self.n -= 1
        return q.popleft()

    def retry(self, unit: EpisodeUnit, attempt: int) -> None:
        self.by_task.setdefault(unit.task, deque()).appendleft((unit, attempt))
        self.n += 1

    def has(self, task: str) -> bool:
        return bool(self.by_task.get(task))

    def keep(self, wanted: Callable[[EpisodeUnit], bool]) -> None:
        """Forget the pending units that are no longer wanted (an adaptive run's task stopped)."""
        for task, q in self.by_task.items():
            kept = deque(item for item in q if wanted(item[0]))
            self.n -= len(q) - len(kept)
            self.by_task[task] = kept


def _rows(batch: Any, lo: int, hi: int) -> Any:
    if isinstance(batch, dict):
        return {k: _rows(v, lo, hi) for k, v in batch.items()}
    return batch[lo:hi]


def _concat(parts: list[Any]) -> Any:
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)


class ContinuousScheduler(WorkerPool):
    def __init__(
        self, ctx: StepContext, units: list[EpisodeUnit], opts: PoolOptions, policy: Policy | None,
        stops: Stops | None = None, transport: Transport | None = None,
    ) -> None:
        if (opts.placement == "driver") != (policy is not None):
            raise ValueError("continuous scheduler: driver placement takes the driver's policy, worker placement none")
        shared = transport is None or transport.shared_memory
        super().__init__(ctx, opts, flat_layout(ctx, {u.task for u in units}) if shared else None, transport=transport)
        self.queue = UnitQueue(units)
        self.n_slots_total = opts.workers * opts.slots_per_worker
        self.policy = policy
        self.open_tasks = {u.task for u in units}
        self.stops = stops
        self.stops_seen = stops.version if stops is not None else 0
        self.ready = stops.ready if stops is not None and stops.paces else None  # held back: not yet
        self.held_at = float("-inf")
        self.cancelling: set[Any] = set()  # unit keys a cancel was sent for
        # units a worker held when it died, its transport unable to say which one killed it:
        # each runs alone on a worker (`alone`), and no worker gets other units while any wait
        self.suspects: deque[tuple[EpisodeUnit, int]] = deque()
        self.alone: set[int] = set()
        # driver placement: a policy call that hangs ends the run in one line (worker
        # placement: the worker's heartbeat stops, and the pool charges the call's episodes)
        self.watch = PolicyWatch(opts.step_timeout_s if policy is not None else None, ctx, policy)

    # -- bookkeeping -----------------------------------------------------------------
    def _fill(self, w: WorkerHandle) -> None:
        """Top up w's slots (current + `queue_per_slot` more while work is plentiful) and send."""
        if w.index in self.alone:
            if w.busy():
                return  # a suspect runs alone: if this worker dies, the suspect is the cause
            self.alone.discard(w.index)
        if self.suspects:
            if not w.busy():
                unit, attempt = self.suspects.popleft()
                w.slots[0].append((unit, attempt))
                w.last_task[0] = unit.task
                self.alone.add(w.index)
                self.send(w, ("assign", [(0, unit, attempt)]))
            return  # the others drain, so that each suspect soon finds a worker of its own
        depth = 1 + self.opts.queue_per_slot if len(self.queue) >= self.n_slots_total else 1
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
            self.send(w, ("assign", assigned))

    def _busy_elsewhere(self, w: WorkerHandle) -> set[str]:
        """Tasks the other workers' slots are running."""
        return {q[0][0].task for o in self.workers if o is not w for q in o.slots if q}

    def _take_into(self, w: WorkerHandle, i: int, busy_elsewhere: set[str]) -> tuple[Any, ...] | None:
        """Queue the next unit for w's slot i (task affinity); the `assign` entry, or None."""
        q = w.slots[i]
        item = self.queue.take(q[-1][0].task if q else w.last_task[i], busy_elsewhere, self.ready)
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
        depth = 1 + self.opts.queue_per_slot if len(self.queue) >= self.n_slots_total else 1
        assigned: dict[int, list[tuple[Any, ...]]] = {w.index: [] for w in self.workers}
        for level in range(1, depth + 1):
            for i in range(self.opts.slots_per_worker):
                for w in self.workers:
                    if len(w.slots[i]) < level and len(self.queue):
                        item = self._take_into(w, i, self._busy_elsewhere(w))
                        if item is not None:  # None: the rest is held back (`self.ready`)
                            assigned[w.index].append(item)
        for w in self.workers:
            if assigned[w.index]:
                self.send(w, ("assign", assigned[w.index]))

    def _give_up_or_retry(self, unit: EpisodeUnit, attempt: int, error: str, worker: str) -> Iterator[EpisodeRecord]:
        return retry_or_fail(unit, attempt, self.opts.max_retries, error, worker, self.queue.retry)

    def _absorb(self, w: WorkerHandle, report: Report) -> Iterator[EpisodeRecord]:
        w.reported = True
        if report.policy_calls is not None:  # worker placement: its policy's calls, counted in the driver's ctx
            w.policy_calls = self.ctx.counts.add_since(w.policy_calls, report.policy_calls)
        ended = False
        for event in report.events:
            if event[0] == "started":
                w.started[event[1]] = True
            elif event[0] == "cancelled":
                self._cancelled(w, event[1], event[2])
                ended = True
            elif event[0] == "record":
                i, rec = event[1], event[2]
                unit, _ = w.slots[i].popleft()
                assert unit.key == rec.key, (unit.key, rec.key)
                w.started[i] = False
                ended = True
                self.ended(w)
                yield rec
            else:
                ended = True
                self.ended(w)
                yield from self._slot_error(w, event[1])
        started = [(i, u) for i, u in report.started() if w.started[i] and w.slots[i] and w.slots[i][0][0] == u]
        if started and self.policy is not None:
            k = self.opts.slots_per_worker
            with self.watch.call("reset", lambda: [u for _, u in started]):
                self.ctx.reset(self.policy, [w.index * k + i for i, _ in started],
                               [self.ctx.episode_start(u) for _, u in started])
        if ended:
            self._close_finished_tasks()

    def _slot_error(self, w: WorkerHandle, err: SlotError) -> Iterator[EpisodeRecord]:
        unit, attempt = w.slots[err.slot].popleft()
        assert unit.key == err.unit.key
        w.started[err.slot] = False
        yield from self._give_up_or_retry(unit, attempt, f"error in {w.link.name} on {unit.label()}: {err.error}", w.link.tag)

    def _lost(self, w: WorkerHandle, why: str) -> Iterator[EpisodeRecord]:
        """Worker w is gone (died or hung): the unit it was inside uses up one of its
        retries, the other episodes it interrupted are simply run again (`WorkerPool.bury`)."""
        loss = self.bury(w, why)
        self.alone.discard(w.index)
        for _, unit, attempt in loss.charged:
            yield from self._give_up_or_retry(unit, attempt, loss.error(unit), loss.worker.link.tag)
        for _, unit, attempt in loss.interrupted:
            self.queue.retry(unit, attempt)
        self.suspects.extend((unit, attempt) for _, unit, attempt in loss.suspects)

    def _prune(self) -> None:
        """An adaptive run's task stopped (`stops` changed): forget its queued units past the
        stop, and cancel those the workers hold, running ones included."""
        stops = self.stops
        if stops is None or stops.version == self.stops_seen:
            return
        self.stops_seen = stops.version
        self.queue.keep(stops.wanted)
        self.suspects = deque(item for item in self.suspects if stops.wanted(item[0]))
        for w in self.workers:
            keys = [u.key for q in w.slots for u, _ in q if not stops.wanted(u) and u.key not in self.cancelling]
            if keys:
                self.cancelling.update(keys)
                self.send(w, ("cancel", keys))
        self._close_finished_tasks()

    def _cancelled(self, w: WorkerHandle, i: int, key: Any) -> None:
        q = w.slots[i]
        for j, (unit, _) in enumerate(q):
            if unit.key == key:
                del q[j]
                if j == 0:
                    w.started[i] = False
                return

    def _close_finished_tasks(self) -> None:
        for task in list(self.open_tasks):
            if (self.queue.has(task) or any(u.task == task for u, _ in self.suspects)
                    or any(u.task == task for w in self.workers for q in w.slots for u, _ in q)):
                continue
            self.open_tasks.discard(task)
            for w in self.workers:
                self.send(w, ("close_task", task))

    def _done(self) -> bool:
        return not len(self.queue) and not self.suspects and not any(w.busy() for w in self.workers)

    def _held(self) -> bool:
        """Units wait that `ready` held back (pacing): read the rule's sources again (a
        decision there cancels units here), and give idle slots what may start now."""
        if self.ready is None or not len(self.queue):
            return False
        now = time.monotonic()
        if now - self.held_at >= HELD_POLL_S:
            self.held_at = now
            assert self.stops is not None
            self.stops.refresh()
            self._prune()
        return True

    # -- the two driving loops -------------------------------------------------------
    def run(self) -> Iterator[EpisodeRecord]:
        try:
            self.start()
            if self.opts.placement == "worker":
                yield from self._run_worker_placement()
            else:
                with _torch_threads(self.opts.driver_threads), self.watch:
                    yield from self._run_driver_placement()
        finally:
            self.close()

    def _run_worker_placement(self) -> Iterator[EpisodeRecord]:
        self._fill_all()
        while not self._done():
            for w, msg in self.receive(list(self.workers), timeout=0.5):
                if msg[0] == "report":
                    yield from self._absorb(w, msg[1])
                elif msg[0] == "fatal":
                    self.fatal(msg)
                elif msg[0] == "lost":
                    yield from self._lost(w, msg[1])
                    w = self.workers[w.index]
                self._prune()
                self._fill(w)
            if self._held() or self.suspects:
                for w in self.workers:
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
            if not any(w.inflight for w in self.workers) and self._held():
                time.sleep(HELD_POLL_S)  # every unit left is held back: nothing steps, nothing to wait on
                for w in self.workers:
                    self._send_step(w, {})

    def _send_step(self, w: WorkerHandle, actions: dict[int, Any]) -> None:
        self._prune()
        self._fill(w)
        if actions or any(w.slots):
            self.send(w, ("step", actions))
            w.inflight = True

    def _collect(self, group: list[int]) -> Iterator[EpisodeRecord]:
        """Wait for the replies of the group's in-flight workers."""
        self._obs: dict[int, Any] = {}
        while True:
            waiting = [self.workers[i] for i in group if self.workers[i].inflight]
            if not waiting:
                return
            for w, msg in self.receive(waiting, timeout=0.5):
                if msg[0] == "stepped":
                    w.inflight = False
                    if msg[1].obs is not None:
                        self._obs[w.index] = msg[1].obs
                    yield from self._absorb(w, msg[1])
                elif msg[0] == "fatal":
                    self.fatal(msg)
                elif msg[0] == "lost":
                    yield from self._lost(w, msg[1])
                    self._send_step(self.workers[w.index], {})

    def _infer_and_send(self, group: list[WorkerHandle]) -> None:
        assert self.policy is not None
        k = self.opts.slots_per_worker
        parts, slots, prompts, owners = [], [], [], []
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
                prompts.append(self.ctx.benchmark.policy_task(w.slots[i][0][0].task))
                owners.append((w, i))
        actions: dict[int, dict[int, Any]] = {w.index: {} for w in group}
        abandon: dict[int, list[tuple[int, str]]] = {w.index: [] for w in group}
        if slots:
            batch = _concat(parts) if self.layout is not None else stack_any(parts)
            bound = self.opts.max_rows_per_call or len(slots)
            for lo in range(0, len(slots), bound):  # --policy.max_batch_size bounds a call (e.g. GPU memory)
                hi = min(lo + bound, len(slots))
                part = batch if bound >= len(slots) else _rows(batch, lo, hi)
                # episodes the policy lost (its server restarted) end as errors and run again
                with self.watch.call("act", functools.partial(_heads, owners[lo:hi])):
                    got, lost = act_surviving(self.ctx, self.policy, part, slots[lo:hi], prompts[lo:hi])
                for r, a in got.items():
                    w, i = owners[lo + r]
                    actions[w.index][i] = a
                for r, why in lost.items():
                    w, i = owners[lo + r]
                    abandon[w.index].append((i, why))
        for w in group:
            if abandon[w.index]:
                self.send(w, ("abandon", abandon[w.index]))
            self._send_step(w, actions[w.index])


def _heads(owners: list[tuple[WorkerHandle, int]]) -> list[EpisodeUnit]:
    """The units running on these (worker, slot)s: a policy call's episodes."""
    return [w.slots[i][0][0] for w, i in owners]


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """At most `n` torch intra-op threads in this process while the block runs.

    Driver placement: the workers keep the cores busy with envs while the driver runs the
    policy, so torch's default pool (one thread per core) only fights them; its OpenMP
    threads also spin while they wait. On 2 cores with 2 workers (PushT pixels, LeRobot ACT,
    a loaded machine) the driver burnt 109 s of CPU with 2 threads and 11 s with 1, and the
    run took 138 s instead of 32 s. A user's $OMP_NUM_THREADS (or a smaller pool) is kept.
    """
    torch = sys.modules.get("torch")  # a policy that uses torch has imported it by now
    if n is None or torch is None or os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads() <= n:
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
    stops: Stops | None = None,
) -> Iterator[EpisodeRecord]:
    """Run `units` on a pool of `opts.workers` workers; yield each record as its episode ends.

    Driver placement runs `policy` (the caller's: it built it, it closes it) in this process;
    worker placement builds one policy in every worker and takes none here.
    """
    if not units:
        return iter(())
    return ContinuousScheduler(ctx, units, opts, policy, stops).run()
