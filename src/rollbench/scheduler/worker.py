"""The env worker process: K slots, each running one episode at a time.

Messages from the driver (a `multiprocessing` pipe):

    ("assign", [(slot, unit, attempt), ...])   queue units on slots
    ("step", {slot: action})                    driver placement: step those slots, reply
    ("close_task", task)                        no unit of `task` is left: free its envs
    ("abandon", [(slot, why), ...])             the policy lost those slots' episodes: end them
                                                as errors (reported with the next step's reply)
    ("cancel", [unit key, ...])                 those units are no longer wanted (an adaptive
                                                run's task stopped): drop them, queued or running,
                                                each reported as ("cancelled", slot, key)
    ("stop",)

Replies: ("stepped", Report) in driver placement; ("report", Report) whenever episodes end
in worker placement, where the worker runs the policy itself and steps its slots without
a round trip. ("fatal", text, kind) for an error that dooms the whole run (a bad policy; kind: its class).

Observations go to the driver through the worker's `SlotBuffer` (shared memory) when the
benchmark's observation space is flat (Box / Dict of Box); otherwise they are pickled.
An exception inside an env costs only that slot's unit: the env is dropped, the error
and traceback are reported, and the driver decides whether to retry.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import traceback
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from rollbench.config.env import BenchmarkConfig
from rollbench.config.eval import RecordRule
from rollbench.config.policy import PolicyConfig
from rollbench.episode.context import StepContext, stack_any
from rollbench.episode.tracker import EpisodeTracker
from rollbench.episode.video import Filming, VideoPlan
from rollbench.errors import EpisodesLost, PolicyError, RollbenchError
from rollbench.plan import EpisodeUnit
from rollbench.rendering import apply_backend, gl_failure_hint
from rollbench.scheduler.shm import ArraySpec, SlotBuffer

#: the mark a worker leaves in its header while its own policy runs (worker placement): a
#: hang or death then is the policy call's, on the episodes of the slots it runs
IN_POLICY = -2


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    n_slots: int
    benchmark: BenchmarkConfig
    policy: PolicyConfig | None  # set: the policy runs here (worker placement)
    layout: tuple[ArraySpec, ...] | None
    buffer_path: str
    log_path: str
    gl_backend: str = "egl"  # MUJOCO_GL, set before anything in the worker imports MuJoCo
    video: VideoPlan | None = None
    env_cache: int = 4  # idle envs kept per worker, across tasks
    record_mode: RecordRule | None = None  # --eval.recording: keep the frames of these episodes
    threads: int = 1  # OpenMP and torch intra-op threads of this worker (`Schedule.worker_threads`)
    paraphrases: str = ""  # --eval.paraphrases, for language.paraphrase's episodes a policy here acts in


@dataclass
class SlotError:
    slot: int
    unit: EpisodeUnit
    attempt: int
    error: str


@dataclass
class Report:
    """What happened in the worker since its last report, in the order it happened.

    events: ("record", slot, EpisodeRecord) | ("error", SlotError) | ("started", slot, unit)
            | ("cancelled", slot, unit key)
    """

    events: list[tuple[Any, ...]] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    obs: dict[int, Any] | None = None  # pickled observations when there is no flat layout
    policy_calls: tuple[int, int] | None = None  # worker placement: this worker's (calls, rows) so far

    def __bool__(self) -> bool:
        return bool(self.events)

    def started(self) -> list[tuple[int, EpisodeUnit]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "started"]


@dataclass
class Slot:
    queue: deque[tuple[EpisodeUnit, int]] = field(default_factory=deque)
    env: Any = None
    task: str | None = None
    tracker: EpisodeTracker | None = None
    attempt: int = 0
    obs: Any = None


class Worker:
    def __init__(self, spec: WorkerSpec, conn: Any) -> None:
        self.spec = spec
        self.conn = conn
        self.name = f"w{spec.index}/pid{os.getpid()}"
        self.bench = spec.benchmark
        self.slots = [Slot() for _ in range(spec.n_slots)]
        self.idle_envs: OrderedDict[int, tuple[str, Any]] = OrderedDict()
        self.buffer = SlotBuffer(spec.layout, spec.n_slots, spec.buffer_path)
        self.ctx = StepContext(spec.benchmark, spec.policy, paraphrases=spec.paraphrases) if spec.policy is not None else None
        self.policy = self.ctx.make_policy() if self.ctx is not None else None
        self.base_slot = spec.index * spec.n_slots
        self.filming = Filming.of(spec.video)
        self._local = SlotBuffer(spec.layout, spec.n_slots)  # private: stacking in worker placement
        self._pending = Report()  # events to send with the next reply (abandoned episodes)

    # -- envs ------------------------------------------------------------------------
    def _env_for(self, task: str) -> Any:
        for key, (t, env) in self.idle_envs.items():
            if t == task:
                del self.idle_envs[key]
                return env
        return self.bench.make_task_env(task)

    def _release(self, slot: Slot) -> None:
        if slot.env is None:
            return
        self.idle_envs[id(slot.env)] = (slot.task or "", slot.env)
        while len(self.idle_envs) > self.spec.env_cache:
            _, (_, env) = self.idle_envs.popitem(last=False)
            env.close()
        slot.env, slot.task = None, None

    def _drop(self, slot: Slot) -> None:
        env, slot.env, slot.task = slot.env, None, None
        if env is not None:
            try:
                env.close()
            except Exception:  # an env that just failed may fail to close too
                pass

    def close_task(self, task: str) -> None:
        for key in [k for k, (t, _) in self.idle_envs.items() if t == task]:
            self.idle_envs.pop(key)[1].close()

    # -- episodes --------------------------------------------------------------------
    def _fail(self, i: int, report: Report) -> None:
        slot = self.slots[i]
        assert slot.tracker is not None
        text = traceback.format_exc()
        hint = gl_failure_hint(text, self.spec.gl_backend)
        text = f"{self.name}: {text.strip()}" + (f"\n{hint}" if hint else "")
        report.events.append(("error", SlotError(i, slot.tracker.unit, slot.attempt, text)))
        slot.tracker.drop()
        slot.tracker = None
        self._drop(slot)

    def _abandon(self, i: int, why: str, report: Report) -> None:
        """Slot i's episode cannot go on (the policy lost its state): an error for the
        driver to retry; the env is fine and stays for the slot's next episode."""
        slot = self.slots[i]
        if slot.tracker is None:
            return
        report.events.append(("error", SlotError(i, slot.tracker.unit, slot.attempt, f"{self.name}: {why}")))
        slot.tracker.drop()
        slot.tracker = None

    def _cancel(self, keys: set[Any], report: Report) -> None:
        """Drop the units of `keys` from every slot, the running episode too (its env stays)."""
        for i, slot in enumerate(self.slots):
            for unit, attempt in list(slot.queue):
                if unit.key in keys:
                    slot.queue.remove((unit, attempt))
                    report.events.append(("cancelled", i, unit.key))
            if slot.tracker is not None and slot.tracker.unit.key in keys:
                report.events.append(("cancelled", i, slot.tracker.unit.key))
                slot.tracker.drop()
                slot.tracker = None

    def _start(self, i: int, report: Report) -> None:
        """Reset slot i into its next queued unit (task affinity: reuse its env if same task)."""
        slot = self.slots[i]
        while slot.tracker is None and slot.queue:
            unit, attempt = slot.queue.popleft()
            if slot.task != unit.task:
                self._release(slot)
            slot.tracker = EpisodeTracker.of(self.bench, unit, self.spec.record_mode, self.filming, attempt)
            slot.attempt = attempt
            self.buffer.touch(i)
            try:
                if slot.env is None:
                    slot.env, slot.task = self._env_for(unit.task), unit.task
                obs = slot.tracker.reset(self.bench, slot.env)
            except Exception:
                self._fail(i, report)
                self.buffer.touch()  # (after its env closed: the slot is out of this unit)
                continue
            slot.obs = obs
            self.buffer.touch()  # (after its first frame: a render that kills the worker is this unit's)
            report.events.append(("started", i, unit))

    def _step(self, i: int, action: Any, report: Report) -> None:
        slot = self.slots[i]
        assert slot.tracker is not None
        self.buffer.touch(i)
        try:
            slot.obs, ended = slot.tracker.step(self.bench, slot.env, slot.obs, action)
        except Exception:
            self._fail(i, report)
            self.buffer.touch()  # (after its env closed: the slot is out of this unit)
            return
        if ended:
            report.events.append(("record", i, slot.tracker.record(self.name)))
            slot.tracker = None
        self.buffer.touch()  # (after its frame and video: a render or encoder that kills the worker is this unit's)

    def _stack(self, obs: list[Any]) -> Any:
        """Running slots' observations stacked as a vector env would (the space's dtypes),
        through one buffer kept for the worker's life: nothing is allocated per step."""
        for j, o in enumerate(obs):
            self._local.write(j, o)
        return self._local.read(range(len(obs)))

    def close(self) -> None:
        """Finish the videos, then close every env (GL contexts are freed before exit)."""
        if self.filming is not None:
            self.filming.close()
        for slot in self.slots:
            self._drop(slot)
        while self.idle_envs:
            _, (_, env) = self.idle_envs.popitem()
            try:
                env.close()
            except Exception:
                pass

    def _running(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.tracker is not None]

    def _publish(self, report: Report) -> None:
        report.running = self._running()
        if self.spec.layout is not None:
            for i in report.running:
                self.buffer.write(i, self.slots[i].obs)
        else:
            report.obs = {i: self.slots[i].obs for i in report.running}

    # -- messages --------------------------------------------------------------------
    def handle(self, msg: tuple[Any, ...]) -> bool:
        """Apply one driver message; False on stop."""
        kind = msg[0]
        if kind == "assign":
            for slot, unit, attempt in msg[1]:
                self.slots[slot].queue.append((unit, attempt))
        elif kind == "close_task":
            self.close_task(msg[1])
        elif kind == "abandon":
            for i, why in msg[1]:
                self._abandon(i, why, self._pending)
        elif kind == "cancel":
            self._cancel(set(msg[1]), self._pending)
        elif kind == "step":
            report, self._pending = self._pending, Report()
            for i, action in msg[1].items():
                if self.slots[i].tracker is not None:  # not cancelled since the action was computed
                    self._step(i, action, report)
            for i in range(len(self.slots)):
                self._start(i, report)
            self._publish(report)
            self.conn.send(("stepped", report))
        elif kind == "stop":
            return False
        return True

    def run(self) -> None:
        """The worker's loop until `stop` (its placement's: with its own policy, or envs only
        for the driver's), then its videos finished, its envs and its own policy closed. The
        errors that end it are the caller's to report (`("fatal", text, kind)`)."""
        try:
            if self.spec.policy is not None:
                self.run_worker_placement()
            else:
                self.run_driver_placement()
        finally:
            self.close()
            if self.policy is not None:  # worker placement: this worker's own (a connection, a model's memory)
                self.policy.close()

    def run_driver_placement(self) -> None:
        while self.handle(self.conn.recv()):
            pass

    def run_worker_placement(self) -> None:
        assert self.ctx is not None and self.policy is not None
        layout = self.spec.layout
        while True:
            if not self._running() and not any(s.queue for s in self.slots) and not self._pending:
                if not self.handle(self.conn.recv()):
                    return
                continue
            while self.conn.poll():
                if not self.handle(self.conn.recv()):
                    return
            report, self._pending = self._pending, Report()  # cancelled units, say
            for i in range(len(self.slots)):
                self._start(i, report)
            started = report.started()
            if report:  # the driver learns which episodes run before the policy is called on them, so that a
                report.policy_calls = (self.ctx.counts.calls, self.ctx.counts.rows)  # call that hangs or kills
                self.conn.send(("report", report))  # this worker is charged to them (`WorkerPool.bury`)
                report = Report()
            if started:
                self.buffer.touch(IN_POLICY)
                self.ctx.reset(self.policy, [self.base_slot + i for i, _ in started], [self.ctx.episode_start(u) for _, u in started])
                self.buffer.touch()
            running = self._running()
            if running:
                obs = [self.slots[i].obs for i in running]
                batch = self._stack(obs) if layout is not None else stack_any(obs)
                prompts = [self.bench.policy_task(self.slots[i].task or "") for i in running]
                try:
                    self.buffer.touch(IN_POLICY)
                    actions = self.ctx.act(self.policy, batch, [self.base_slot + i for i in running], prompts)
                    self.buffer.touch()
                except EpisodesLost as lost:
                    self.buffer.touch()
                    gone = [i for i in running if self.base_slot + i in lost.slots]
                    if not gone:
                        raise PolicyError(f"policy lost episodes of slots it was not asked about: {lost}") from None
                    for i in gone:  # the others are asked again in the next round
                        self._abandon(i, str(lost), report)
                else:
                    for j, i in enumerate(running):
                        self._step(i, actions[j], report)
            if report:
                report.policy_calls = (self.ctx.counts.calls, self.ctx.counts.rows)
                self.conn.send(("report", report))


def worker_main(conn: Any, spec: WorkerSpec) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides how to stop
    log = open(spec.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    # stdout and stderr of the worker (and of any C library in it) go to its log file
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    apply_backend(spec.gl_backend)
    # the schedule's threads, set here and not left to the environment the forkserver had
    # (an OpenMP runtime already loaded while the spec was unpickled reads it too late)
    os.environ["OMP_NUM_THREADS"] = str(spec.threads)
    try:
        worker = Worker(spec, conn)
        torch = sys.modules.get("torch")  # a policy that uses torch has imported it by now
        if torch is not None:
            torch.set_num_threads(spec.threads)
        print(f"worker {spec.index} (pid {os.getpid()}): MUJOCO_GL={spec.gl_backend}, {spec.threads} OpenMP/torch "
              f"threads", file=sys.stderr, flush=True)
        worker.buffer.touch()
        worker.run()
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(f"worker {spec.index} (pid {os.getpid()}) done: peak RSS {peak_mib:.0f} MiB", file=sys.stderr, flush=True)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the driver went away
    except RollbenchError as err:
        _send_fatal(conn, str(err), type(err).__name__)
    except Exception as err:
        traceback.print_exc()
        text = f"worker {spec.index} (pid {os.getpid()}) failed: {type(err).__name__}: {err}\n{traceback.format_exc()}"
        _send_fatal(conn, text, "WorkerError")


def _send_fatal(conn: Any, text: str, kind: str) -> None:
    try:
        conn.send(("fatal", text, kind))
    except (BrokenPipeError, OSError):
        pass
