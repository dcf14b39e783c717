"""An executor plugin with a transport of its own: every env worker in a thread of this process.

`--executor=threads` (load with ROLLBENCH_PLUGINS=threads_transport) runs the units with the
continuous scheduler, as the local executor does, but its `Threads` transport starts each env
worker (`scheduler.worker.Worker` and its loop) in a thread instead of a process, and talks to
it through a pair of queue-backed channels instead of a pipe. Messages are pickled on the way,
as a pipe would: neither side sees an object the other may still change. There is no shared
memory (`shared_memory = False`: threads gain nothing from a mapped file, the observations come
in the replies), so each worker's heartbeat file in `shm_dir()` is its 64-byte header alone.
Its workers are `--workers` (default: the CPU cores), one core apiece. A thread cannot be
killed: a hung or killed worker's thread is abandoned (a daemon), its channel closed.

Written from docs/adding_an_executor.md ("An executor with a new transport") alone, as a test
of that guide (issue 48).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext
from rollbench.errors import RollbenchError
from rollbench.executors import EXECUTORS
from rollbench.executors.base import Executor, Run
from rollbench.policies.base import Policy
from rollbench.rendering import apply_backend
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.records import EpisodeRecord
from rollbench.scheduler.continuous import ContinuousScheduler
from rollbench.scheduler.decide import Cluster, Schedule, decide
from rollbench.scheduler.pool import STARTING, WorkerPool
from rollbench.scheduler.shm import SlotBuffer, shm_dir
from rollbench.scheduler.worker import Worker, WorkerSpec

_CLOSED = object()  # put in a worker's inbox: its connection ended (its recv raises EOFError)


class WorkerEnd:
    """The worker's end of the "pipe": what `Worker` needs of `conn` (recv, poll, send)."""

    def __init__(self, link: ThreadLink) -> None:
        self.link = link
        self.inbox: queue.Queue[Any] = queue.Queue()  # driver -> worker, pickled

    def recv(self) -> Any:
        item = self.inbox.get()
        if item is _CLOSED:
            self.inbox.put(_CLOSED)  # every later recv ends too
            raise EOFError
        return pickle.loads(item)

    def poll(self) -> bool:
        return not self.inbox.empty()

    def send(self, msg: tuple[Any, ...]) -> None:
        self.link.deliver(pickle.dumps(msg))


class ThreadLink:
    """One worker thread, as the pool sees it (the `Link` protocol)."""

    def __init__(self, transport: Threads, spec: WorkerSpec) -> None:
        self.transport = transport
        self.name, self.tag, self.at = f"worker {spec.index}", f"w{spec.index}", f"thread of pid {os.getpid()}"
        self.buffer = None  # no shared memory: the observations come in the reports
        self.logged_to = "this process's stderr"
        # rollbench-<pid>-...: `sweep_shm` removes it once this process is gone, if it could not
        self.path = os.path.join(shm_dir(), f"rollbench-{os.getpid()}-threads-{id(self):x}-w{spec.index}.buf")
        self.header = SlotBuffer(None, spec.n_slots, self.path, create=True)  # the header alone
        self.header.touch(STARTING)
        self.spec = dataclasses.replace(spec, buffer_path=self.path)  # log_path stays os.devnull: no file of its own
        self.conn = WorkerEnd(self)
        self.outbox: deque[bytes] = deque()  # worker -> driver, pickled, read by `Threads.wait`
        self.closed = self.stop_sent = False
        self.error = ""  # the traceback that ended its loop
        self.done = self.lost_told = False  # done: its loop has ended (the thread is about to)
        self.thread = threading.Thread(target=self._main, name=f"rollbench-{self.tag}", daemon=True)
        self.thread.start()

    # -- the worker's side -------------------------------------------------------------
    def _main(self) -> None:
        spec = self.spec
        try:
            # process-wide in a thread: every worker of a run has the same values
            apply_backend(spec.gl_backend)
            os.environ["OMP_NUM_THREADS"] = str(spec.threads)
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(spec.threads)
            Worker(spec, self.conn).run()
        except (EOFError, BrokenPipeError):
            pass  # the driver closed this worker's channel
        except Exception as e:  # the loop's end, told to the driver
            self.error = traceback.format_exc()
            ours = isinstance(e, RollbenchError)  # its message is the one line the user reads
            try:
                self.conn.send(("fatal", str(e) if ours else self.error, type(e).__name__ if ours else "WorkerError"))
            except BrokenPipeError:
                pass
        finally:
            self.done = True
            self.transport.wake()

    def deliver(self, data: bytes) -> None:
        if self.closed:
            raise BrokenPipeError
        with self.transport.cond:
            self.outbox.append(data)
            self.transport.cond.notify_all()

    # -- the driver's side (the Link protocol) -------------------------------------------
    def send(self, msg: tuple[Any, ...]) -> None:
        if not self.closed:
            self.stop_sent = self.stop_sent or msg == ("stop",)
            self.conn.inbox.put(pickle.dumps(msg))  # a FIFO: the order they were sent in

    def last_sign(self) -> float:
        return float(self.header.beat[0])

    def inside(self, hung: bool) -> int | None:
        return int(self.header.current[0])

    def stop(self, kill: bool = False) -> None:
        if not kill and self.thread.is_alive() and not self.closed:
            if not self.stop_sent:
                self.send(("stop",))
            self.thread.join(timeout=30)
        self.closed = True
        self.conn.inbox.put(_CLOSED)  # a thread still stepping (hung) ends at its next recv or send
        if os.path.exists(self.path):
            os.unlink(self.path)  # its mapping stays valid for the thread, if it still runs

    def ended(self) -> tuple[str, str]:
        how = "is still running (abandoned)" if self.thread.is_alive() else "ended"
        return how, "\n".join(self.error.splitlines()[-15:])


class Threads:
    """The transport: `Transport` of `scheduler/pool.py`, workers as threads of this process."""

    shared_memory = False

    def __init__(self) -> None:
        self.cond = threading.Condition()  # a worker sent something, or its thread ended

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def open(self, pool: WorkerPool) -> None:
        pass

    def spawn(self, pool: WorkerPool, spec: WorkerSpec, old: Any) -> ThreadLink:
        return ThreadLink(self, spec)  # `old`'s file went with `old.stop`: nothing to reuse

    def _ready(self, links: list[Any]) -> list[tuple[Any, tuple[Any, ...]]]:
        out: list[tuple[Any, tuple[Any, ...]]] = []
        for link in links:
            while link.outbox:
                out.append((link, pickle.loads(link.outbox.popleft())))
            if link.done and not link.lost_told:
                link.lost_told = True
                out.append((link, ("lost", "")))
        return out

    def wait(self, links: list[Any], timeout: float) -> Iterator[tuple[Any, tuple[Any, ...]]]:
        deadline = time.monotonic() + timeout
        with self.cond:
            ready = self._ready(links)
            while not ready and (left := deadline - time.monotonic()) > 0:
                self.cond.wait(left)
                ready = self._ready(links)
        yield from ready

    def close(self, links: list[Any]) -> None:
        for link in links:
            link.send(("stop",))  # all at once, then each joined
        for link in links:
            link.stop()


@EXECUTORS.register("threads")
class ThreadsExecutor(Executor):
    policy: Policy | None = None
    schedule: Schedule | None = None
    scheduler: ContinuousScheduler | None = None

    def setup(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.ctx = StepContext.of_run(cfg)
        self.policy = self.ctx.make_policy()

    def start(self, run: Run) -> None:
        given = self.cfg.workers if isinstance(self.cfg.workers, int) else None
        workers = given or os.cpu_count() or 1
        cluster = Cluster(workers, 1.0, self.cfg.slots_per_worker, actors_flag=given and f"--workers={given}")
        self.schedule = decide(self.cfg, self.policy, len(run.todo), cluster=cluster)
        if self.schedule.placement == "worker" and self.policy is not None:
            self.policy.close()  # each worker builds its own
            self.policy = None

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        assert self.schedule is not None
        self.scheduler = ContinuousScheduler(self.ctx, run.todo, self.schedule.pool_options(self.cfg), self.policy,
                                             run.stops, transport=Threads())
        return self.scheduler.run()

    def facts(self) -> ExecutionFacts:
        scheduling = dataclasses.asdict(self.schedule) if self.schedule is not None else None
        counts = dict(self.scheduler.counts) if self.scheduler is not None else {}  # worker_deaths, requeued_units
        return ExecutionFacts("threads", scheduling=scheduling, detail={"counts": counts},
                              policy_calls=self.ctx.counts.to_json())

    def describe(self) -> str:
        return "(continuous mode, workers in threads)"

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()
