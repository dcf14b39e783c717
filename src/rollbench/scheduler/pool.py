"""A pool of env workers: start, talk to, watch, bury and replace them.

Both schedulers drive their envs through one: continuous mode keeps every slot busy,
lockstep mode steps a batch's envs in it (`scheduler/lockstep.py`). The pool knows which
units sit in which slot of which worker (`WorkerHandle.slots`), notices a worker that
died (its process sentinel, a broken pipe) or stopped making progress (its heartbeat),
and on a loss says which unit was to blame (`Loss`); what happens to the units then is
the scheduler's business.

How the workers run is the pool's `Transport`: processes of this machine with pipes and
shared memory (`Processes`, here), or Ray actors (`executors/ray.py`), so that deaths,
hangs, retries and requeues are written once, here and in the schedulers.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Protocol

from rollbench import forkserver
from rollbench.config.eval import RecordRule
from rollbench.episode.context import StepContext
from rollbench.episode.video import VideoPlan
from rollbench.errors import ConfigError, PolicyError, WorkerError
from rollbench.plan import EpisodeUnit
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import pid_alive
from rollbench.scheduler.shm import ArraySpec, SlotBuffer, obs_layout, shm_dir
from rollbench.scheduler.worker import IN_POLICY, WorkerSpec, worker_main

STDERR_TAIL_LINES = 15
#: a worker that dies this many times in a row without reporting anything stops the run; one
#: that dies this many times in a row outside any unit's work, no episode ending in between,
#: has its running episodes charged the next time (`WorkerPool.bury`)
MAX_FRUITLESS_RESTARTS = 3
#: a worker process's start (imports, a policy built in it) is not a hang before this many
#: seconds, or --eval.step_timeout_s if longer: on a loaded machine a start took over 3 s
START_TIMEOUT_S = 60.0
#: the header's mark from spawn until the worker's first sign of life (`SlotBuffer.current`)
STARTING = -3


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
    queue_per_slot: int = 1  # units queued behind each slot's running one while the queue is long
    driver_threads: int | None = None  # torch threads of this process while it drives (None: as they are)
    worker_threads: int = 1  # OpenMP and torch threads of each worker


@dataclass
class WorkerHandle:
    """What the scheduler knows of one worker: its units, slot by slot, and its `link`."""

    index: int
    link: Link
    slots: list[deque[tuple[EpisodeUnit, int]]]
    started: list[bool]
    inflight: bool = False
    reported: bool = False  # it has sent a report: it got as far as running slots
    sent_at: float = field(default_factory=time.monotonic)
    last_task: list[str | None] = field(default_factory=list)
    policy_calls: tuple[int, int] = (0, 0)  # worker placement: its (calls, rows) counted so far

    def __post_init__(self) -> None:
        self.last_task = [None] * len(self.slots)

    @property
    def buffer(self) -> SlotBuffer:
        """Its observations in shared memory (a worker process on this machine)."""
        assert self.link.buffer is not None, "observations of this transport come pickled"
        return self.link.buffer

    def busy(self) -> bool:
        return any(self.slots)

    def running(self) -> list[int]:
        return [i for i, s in enumerate(self.started) if s]


@dataclass
class Loss:
    """What a dead or hung worker took with it: `charged` units were inside it (each uses
    up an attempt; `error` says why), `interrupted` ones just run again, and `suspects` (a
    transport that cannot tell which unit it was inside) each run again alone, so that the
    next death has one cause."""

    worker: WorkerHandle
    error: Callable[[EpisodeUnit], str]
    charged: list[tuple[int, EpisodeUnit, int]]  # (slot, unit, attempt)
    interrupted: list[tuple[int, EpisodeUnit, int]]
    suspects: list[tuple[int, EpisodeUnit, int]] = field(default_factory=list)


class Link(Protocol):
    """One worker as its transport runs it: a process on this machine (`ProcessLink`), a
    Ray actor (`executors/ray.py`). The pool asks nothing else of it."""

    @property
    def name(self) -> str:
        """"worker 3": the worker in error messages."""
        ...

    @property
    def at(self) -> str:
        """"pid 1234": where it runs."""
        ...

    @property
    def tag(self) -> str:
        """"w3": the worker in an episode record."""
        ...

    @property
    def buffer(self) -> SlotBuffer | None:
        """Its observations in shared memory; None: they come pickled in its reports."""
        ...

    @property
    def logged_to(self) -> str:
        """Where its output went (a file, or Ray's logs of its node)."""
        ...

    def send(self, msg: tuple[Any, ...]) -> None: ...

    def last_sign(self) -> float:
        """This process's `time.monotonic()` of the worker's last sign of life (inf while it
        starts, when its transport cannot see it: a Ray actor may wait for a node's CPUs)."""
        ...

    def inside(self, hung: bool) -> int | None:
        """The slot the worker is (or died) inside a reset or step of; -1: none; None: not known."""
        ...

    def stop(self, kill: bool = False) -> None: ...

    def ended(self) -> tuple[str, str]:
        """How it ended ("was killed by SIGKILL") and the last lines it wrote."""
        ...


class Transport(Protocol):
    """How a pool starts its workers and hears from them."""

    shared_memory: bool  # a flat observation layout may go through shared memory

    def open(self, pool: WorkerPool) -> None: ...

    def spawn(self, pool: WorkerPool, spec: WorkerSpec, old: Link | None) -> Link:
        """A fresh worker for `spec` (in place of `old`, whose resources it may reuse)."""
        ...

    def wait(self, links: list[Link], timeout: float) -> Iterator[tuple[Link, tuple[Any, ...]]]:
        """Messages from `links` that arrive within `timeout`; ("lost", "") for one that died."""
        ...

    def close(self, links: list[Link]) -> None: ...


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


def last_lines(path: Path, n: int = STDERR_TAIL_LINES) -> str:
    """The last `n` lines of a worker's log, or "" when it cannot be read."""
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


@dataclass
class ProcessLink:
    """A worker process on this machine: a pipe, its process sentinel, a file in /dev/shm."""

    name: str
    at: str
    tag: str
    process: Any
    conn: Any
    buffer: SlotBuffer
    log_path: Path

    @property
    def logged_to(self) -> str:
        return str(self.log_path)

    def send(self, msg: tuple[Any, ...]) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # a dead worker's pipe: its sentinel says so, and its units are requeued

    def last_sign(self) -> float:
        return float(self.buffer.beat[0])

    def inside(self, hung: bool) -> int | None:
        return int(self.buffer.current[0])  # the shared memory outlives the process

    def stop(self, kill: bool = False) -> None:
        if not kill:
            self.send(("stop",))
            self.process.join(timeout=120)  # a worker finishes encoding its videos before it exits
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()

    def ended(self) -> tuple[str, str]:
        code = self.process.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        return how, last_lines(self.log_path)


class Processes:
    """Workers as forkserver processes of this machine (the local executor's transport)."""

    shared_memory = True

    def __init__(self) -> None:
        self.mpctx: Any = forkserver.context()

    def open(self, pool: WorkerPool) -> None:
        pool.opts.log_dir.mkdir(parents=True, exist_ok=True)
        sweep_shm()

    def spawn(self, pool: WorkerPool, spec: WorkerSpec, old: Link | None) -> ProcessLink:
        path = os.path.join(shm_dir(), f"{pool.run_id}-w{spec.index}.buf")
        buffer = old.buffer if old is not None and old.buffer is not None else SlotBuffer(pool.layout, spec.n_slots, path, create=True)
        log_path = pool.opts.log_dir / f"worker-{pool.tag}{spec.index}.log"
        spec = dataclasses.replace(spec, buffer_path=path, log_path=str(log_path))
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(f"--- worker {spec.index} starting at {time.strftime('%H:%M:%S')} ---\n")
        parent, child = self.mpctx.Pipe()
        buffer.touch(STARTING)  # the worker's first sign of life replaces the mark
        # one BLAS/OpenMP thread per worker (`worker_threads`): N workers with a full pool each
        # oversubscribe the cores. Each worker sets it again from its spec; the forkserver,
        # started by the first spawn, passes this on to what loads before that
        prev = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(spec.threads)
        try:
            proc = self.mpctx.Process(target=worker_main, args=(child, spec), name=f"rollbench-worker-{pool.tag}{spec.index}",
                                      daemon=True)
            proc.start()
        finally:
            if prev is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = prev
        child.close()
        return ProcessLink(f"worker {spec.index}", f"pid {proc.pid}", f"w{spec.index}", proc, parent, buffer, log_path)

    def wait(self, links: list[Link], timeout: float) -> Iterator[tuple[Link, tuple[Any, ...]]]:
        by_obj: dict[Any, ProcessLink] = {}  # connections and process sentinels
        for link in links:
            assert isinstance(link, ProcessLink)
            by_obj[link.conn] = link
            by_obj[link.process.sentinel] = link
        for obj in wait(list(by_obj), timeout=timeout):
            pl = by_obj[obj]
            if pl.conn.closed:
                continue  # buried since (its message before told the pool it was gone)
            from_pipe = obj is pl.conn  # (not the sentinel)
            if from_pipe:
                try:
                    msg: tuple[Any, ...] = pl.conn.recv()
                except (EOFError, OSError):
                    yield pl, ("lost", "")
                    continue
                yield pl, msg
            elif not pl.conn.poll():
                yield pl, ("lost", "")

    def close(self, links: list[Link]) -> None:
        for link in links:
            link.stop()
            if link.buffer is not None:
                link.buffer.close(unlink=True)


class WorkerPool:
    """`opts.workers` workers, run by `transport` (processes of this machine unless told);
    `tag` keeps the logs and shared memory of pools that run side by side apart (lockstep's
    parallel tasks)."""

    def __init__(self, ctx: StepContext, opts: PoolOptions, layout: tuple[ArraySpec, ...] | None, tag: str = "",
                 transport: Transport | None = None) -> None:
        self.ctx = ctx
        self.opts = opts
        self.transport: Transport = transport if transport is not None else Processes()
        self.layout = layout if self.transport.shared_memory else None
        self.tag = tag
        self.run_id = f"rollbench-{os.getpid()}-{int(time.time() * 1000) % 10**8}{tag}"
        self.workers: list[WorkerHandle] = []
        self.fruitless = [0] * opts.workers  # deaths in a row of a worker that never reported
        self.blameless = [0] * opts.workers  # deaths in a row outside any unit's work, no episode ending between
        self.counts = {"worker_deaths": 0, "requeued_units": 0}

    # -- workers ---------------------------------------------------------------------
    def start(self) -> None:
        self.transport.open(self)
        self.workers = [self.spawn(i) for i in range(self.opts.workers)]

    def spawn(self, index: int, old: Link | None = None) -> WorkerHandle:
        k = self.opts.slots_per_worker
        spec = WorkerSpec(
            index=index, n_slots=k, benchmark=self.ctx.benchmark,
            policy=self.ctx.policy_config if self.opts.placement == "worker" else None,
            layout=self.layout, buffer_path="", log_path=os.devnull, gl_backend=self.opts.gl_backend,
            video=self.opts.video, record_mode=self.opts.record_mode, threads=self.opts.worker_threads,
            paraphrases=self.ctx.paraphrases,
        )
        link = self.transport.spawn(self, spec, old)
        return WorkerHandle(index, link, [deque() for _ in range(k)], [False] * k)

    def close(self) -> None:
        self.transport.close([w.link for w in self.workers])

    # -- messages --------------------------------------------------------------------
    def send(self, w: WorkerHandle, msg: tuple[Any, ...]) -> None:
        """Send; a dead worker is noticed by its transport, and its units requeued."""
        w.link.send(msg)
        w.sent_at = time.monotonic()

    def expecting(self, w: WorkerHandle) -> bool:
        """Whether w owes us a sign of life (driver placement: only a worker we await)."""
        return w.inflight if self.opts.placement == "driver" else w.busy()

    def limit(self, w: WorkerHandle) -> float:
        """Seconds without a sign of life that make w hung: longer while it starts."""
        starting = w.link.inside(hung=True) == STARTING
        return max(self.opts.step_timeout_s, START_TIMEOUT_S) if starting else self.opts.step_timeout_s

    def hung(self, w: WorkerHandle, now: float) -> bool:
        last = max(w.link.last_sign(), w.sent_at)
        return self.expecting(w) and now - last > self.limit(w)

    def receive(self, candidates: list[WorkerHandle], timeout: float) -> Iterator[tuple[WorkerHandle, Any]]:
        """Messages from `candidates` (or ("lost", why) events) that arrive within `timeout`."""
        by_link = {id(w.link): w for w in candidates}
        for link, msg in self.transport.wait([w.link for w in candidates], timeout):
            w = by_link[id(link)]
            if self.workers[w.index] is not w:
                continue  # already replaced in this round
            yield w, msg
        now = time.monotonic()
        for w in candidates:
            if self.workers[w.index] is w and self.hung(w, now):
                yield w, ("lost", f"made no progress for {self.limit(w):g}s (--eval.step_timeout_s; hang)")

    def ended(self, w: WorkerHandle) -> None:
        """An episode of worker w ended (a record, or a unit's own error): its deaths so far were not a loop."""
        self.blameless[w.index] = 0

    @staticmethod
    def fatal(msg: tuple[Any, ...]) -> None:
        text, kind = msg[1], msg[2]
        cls = {"PolicyError": PolicyError, "ConfigError": ConfigError}.get(kind, WorkerError)
        raise cls(text)

    # -- losses ----------------------------------------------------------------------
    def bury(self, w: WorkerHandle, why: str) -> Loss:
        """Worker w is gone (died, or hung: `why`): kill what is left of it, start a fresh
        one in its place, and say which of its units were to blame.

        A worker marks which slot it is inside a reset or step of (its frames and video
        included), so the unit that killed (or hung) it is known: that unit is charged, while
        the other episodes it interrupted are simply run again. Inside its own policy's call
        (worker placement: `IN_POLICY`) the episodes of that call are to blame: one alone is
        charged, several are suspects. When its transport cannot tell (a Ray actor that died:
        its mark died with it), the unit at the head of each slot is a suspect, charged at once
        if it was alone. Suspects each run again alone, so that the next death has one cause.
        Outside all of that (between calls: killed from outside, by a user or the OOM killer)
        no unit is to blame and every episode runs again without penalty; only a worker that
        dies so MAX_FRUITLESS_RESTARTS times in a row, no episode ending in between, has its
        running episodes charged the next time, so that such deaths cannot loop forever.
        """
        inside = w.link.inside(hung=bool(why))
        w.link.stop(kill=True)
        how, text = w.link.ended()
        charged: list[tuple[int, EpisodeUnit, int]] = []
        interrupted: list[tuple[int, EpisodeUnit, int]] = []
        suspects: list[tuple[int, EpisodeUnit, int]] = []
        heads = sum(1 for q in w.slots if q)
        running = sum(1 for i, q in enumerate(w.slots) if q and w.started[i])
        looping = inside is not None and inside < 0 and inside != IN_POLICY and self.blameless[w.index] >= MAX_FRUITLESS_RESTARTS
        for i, q in enumerate(w.slots):
            for n, (unit, attempt) in enumerate(q):
                if n:
                    interrupted.append((i, unit, attempt))
                elif inside is None:
                    (charged if heads == 1 else suspects).append((i, unit, attempt))
                elif inside == IN_POLICY and w.started[i]:
                    (charged if running == 1 else suspects).append((i, unit, attempt))
                elif i == inside or (looping and w.started[i]):
                    charged.append((i, unit, attempt))
                else:
                    interrupted.append((i, unit, attempt))
        if charged or suspects:
            self.blameless[w.index] = 0
        elif running:
            self.blameless[w.index] += 1
        self.counts["worker_deaths"] += 1
        self.counts["requeued_units"] += len(interrupted) + len(suspects)
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
                f"{w.link.name} {why or how} {self.fruitless[w.index]} times in a row before running any episode; "
                f"last lines of {w.link.logged_to}:\n{text or '(empty)'}"
            )
        name = f"{w.link.name} ({w.link.at})"
        where = " in its policy's call" if inside == IN_POLICY else ""
        again = f" ({MAX_FRUITLESS_RESTARTS + 1} times in a row outside any env call)" if looping else ""

        def error(unit: EpisodeUnit) -> str:
            out = f"{name} {why or how}{where} while running {unit.label()}{again}"
            return out + (f"; last stderr lines:\n{text}" if text else "")

        self.workers[w.index] = self.spawn(w.index, w.link)
        return Loss(w, error, charged, interrupted, suspects)
