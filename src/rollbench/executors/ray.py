"""`--executor=ray`: the run's units spread over rollout actors on a Ray cluster.

    driver (this process)                              actor i (a Ray worker process)
    UnitQueue (task affinity) ──run(batch)──▶          rollbench's env worker, in process:
      at most 2 calls in flight per actor                K slots, the policy, envs kept warm
    ◀── (records, slot errors) ──                        across calls (per-slot env, idle cache)
    lifecycle appends each record to the durable log (only the driver writes it)

An actor that dies (SIGKILL, segfault, a lost node) fails all its calls with
`RayActorError`: it is replaced, and the episodes it held are run again, each alone in a
call of its own ("suspects"), so the one that kills its actor is found without charging
the others: a suspect whose actor dies uses up one of its `--eval.max_retries` and is then
logged as failed with the cause. An env that raises costs only its episode (retried, then
failed), as in the local scheduler. An actor that fails in `__init__` (a package missing on
a node) stops the run with the node's error, once. Ray's own `ActorPool` does not requeue,
hence this loop.

A hung env never returns from its call, so the driver asks every busy actor, about once a
second and in a concurrency group of its own (`watch`, a second thread of the actor), how
long ago its worker last showed a sign of life (the same heartbeat the local workers
write). An actor silent for longer than `--eval.step_timeout_s` is killed; its units then
go the way of any dead actor's (the hung one, alone again, is charged and ends failed with
"hang" in its cause).

The episode of a unit is the same function of (task, episode index, seed, policy) as in
the local executor: the actor runs the same worker code, so per-episode results are equal.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.errors import ConfigError, PolicyError, WorkerError, message_line
from rollbench.executors.base import Executor, Run
from rollbench.plan import EpisodeUnit
from rollbench.rendering import apply_backend, choose_backend
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.records import EpisodeRecord
from rollbench.scheduler.common import HELD_POLL_S, PolicyCalls, StepContext
from rollbench.scheduler.continuous import UnitQueue
from rollbench.scheduler.decide import decide_mode, decide_placement, default_slots, video_plan
from rollbench.scheduler.pool import retry_or_fail
from rollbench.scheduler.shm import SlotBuffer, shm_dir
from rollbench.scheduler.worker import Worker, WorkerSpec

log = logging.getLogger(__name__)

#: calls queued on one actor: the next batch waits there while the current one runs
IN_FLIGHT = 2
#: fresh actors that die before answering anything, in a row, before the run stops
MAX_FRUITLESS = 3


def _import_ray() -> Any:
    try:
        import ray  # optional: ray (the ray extra)
    except ImportError:
        raise ConfigError("--executor=ray needs Ray; install it with `pip install 'rollbench[ray]'`") from None
    return ray


class _Inbox:
    """The pipe of an env worker, inside the actor: the actor queues messages, the worker's
    loop reads them, and an empty inbox ends the loop (the batch is done)."""

    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []
        self.sent: list[tuple[Any, ...]] = []

    def poll(self) -> bool:
        return bool(self.messages)

    def recv(self) -> tuple[Any, ...]:
        return self.messages.pop(0) if self.messages else ("stop",)

    def send(self, msg: tuple[Any, ...]) -> None:
        self.sent.append(msg)


class RolloutActor:
    """One env worker with its slots and its own policy, in a Ray actor process."""

    def __init__(self, cfg: RunConfig, n_slots: int, gl_backend: str, threads: int, driver_host: str = "") -> None:
        apply_backend(gl_backend)  # before anything here imports MuJoCo
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        fd, path = tempfile.mkstemp(prefix="rollbench-ray-", suffix=".buf", dir=shm_dir())
        os.close(fd)
        SlotBuffer(None, n_slots, path, create=True)
        self.buffer_path = path
        self.watch = SlotBuffer(None, n_slots, path)  # the worker's heartbeat, read by `silent_s`
        spec = WorkerSpec(
            index=0, n_slots=n_slots, benchmark=cfg.env, policy=cfg.policy, layout=None, buffer_path=path,
            log_path=os.devnull, gl_backend=gl_backend, video=video_plan(cfg), record_mode=cfg.eval.record_mode,
            paraphrases=cfg.eval.paraphrases,
        )
        self.inbox = _Inbox()
        self.worker = Worker(spec, self.inbox)
        self.worker.name = f"ray-{os.getpid()}"
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(threads)
        self.worker.buffer.touch()  # alive: `silent_s` counts from here until the first call starts
        mode = cfg.ray.upload_videos
        self.upload = mode == "true" or (mode == "auto" and socket.gethostname() != driver_host)
        self.output_dir = cfg.output_dir

    def where(self) -> str:
        return f"{socket.gethostname()} pid {os.getpid()}"

    def silent_s(self) -> float:
        """Seconds since the worker's last sign of life (called in the `watch` group, while
        `run` may be stuck in an env)."""
        return time.monotonic() - float(self.watch.beat[0])

    def run(self, batch: list[tuple[EpisodeUnit, int]]) -> tuple[
        list[EpisodeRecord], list[tuple[EpisodeUnit, int, str]], list[tuple[str, bytes]], tuple[int, int],
    ]:
        """Run `batch` [(unit, attempt)] on the slots; (records, [(unit, attempt, error)],
        [(video path relative to the output dir, its bytes)] when videos go back to the driver,
        the (calls, rows) its policy has made so far)."""
        self.worker.buffer.touch()  # a call starts: the clock of `silent_s` starts again
        n = len(self.worker.slots)
        self.inbox.messages.append(("assign", [(i % n, unit, attempt) for i, (unit, attempt) in enumerate(batch)]))
        self.worker.run_worker_placement()
        records, errors = [], []
        for _, report in self.inbox.sent:
            for event in report.events:
                if event[0] == "record":
                    records.append(event[2])
                elif event[0] == "error":
                    err = event[1]
                    errors.append((err.unit, err.attempt, err.error))
        self.inbox.sent.clear()
        counts = self.worker.ctx.counts if self.worker.ctx is not None else None
        return records, errors, self._videos(records), (counts.calls, counts.rows) if counts else (0, 0)

    def _videos(self, records: list[EpisodeRecord]) -> list[tuple[str, bytes]]:
        """The finished videos of `records`, read and removed here (the driver writes them)."""
        if not self.upload or self.worker.videos is None or not any(r.video_path for r in records):
            return []
        self.worker.videos.close()  # wait until this call's videos are encoded (restarts on the next frame)
        out = []
        for r in records:
            if r.video_path:
                path = Path(self.output_dir) / r.video_path
                try:
                    out.append((r.video_path, path.read_bytes()))
                    path.unlink()
                except OSError:  # the recorder failed on it: the report lists only videos that exist
                    pass
        return out

    def close(self) -> None:
        self.worker.close()
        if self.worker.policy is not None:
            self.worker.policy.close()
        try:
            os.unlink(self.buffer_path)
        except OSError:
            pass


@dataclass
class _Actor:
    index: int
    handle: Any
    generation: int
    calls: int = 0
    holds_suspect: bool = False  # its one call in flight is a suspect, alone: nothing queues behind it
    answered: bool = False
    last_task: str | None = None
    probe: Any = None  # a `silent_s` call in flight
    hung: str | None = None  # why the driver killed it
    policy_calls: tuple[int, int] = (0, 0)  # its policy's (calls, rows), counted so far


@dataclass
class _Plan:
    """What the driver decided for the cluster."""

    address: str
    started_cluster: bool
    actors: int
    cpus_per_actor: float
    gpus_per_actor: float
    slots_per_actor: int
    units_per_call: int
    gl_backend: str
    cluster_cpus: float
    cluster_gpus: float
    counts: dict[str, int] = field(default_factory=lambda: {"actors_started": 0, "actor_deaths": 0, "requeued_units": 0, "videos_uploaded": 0})


class RayExecutor(Executor):
    def __init__(self) -> None:
        self.cfg: RunConfig | None = None
        self.ray: Any = None
        self.plan: _Plan | None = None
        self.actors: list[_Actor] = []
        self.cheap = False
        self.counts = PolicyCalls()  # every actor's policy calls

    def setup(self, cfg: RunConfig) -> None:
        if cfg.workers == "auto":
            raise ConfigError("--workers=auto is for the local executor; with --executor=ray set --ray.actors "
                              "and --ray.cpus_per_actor (rollbench tune does not measure clusters yet)")
        self.ray = _import_ray()
        if cfg.ray.address and not self.ray.is_initialized():
            check_reachable(cfg.ray.address, cfg.ray.connect_timeout_s)
        policy = StepContext(cfg.env, cfg.policy, cfg.seed).make_policy()  # a bad policy fails here, before any output
        try:
            if decide_mode(cfg, policy) != "continuous":
                raise ConfigError(
                    f"--executor=ray runs continuous batching; policy {cfg.policy.type!r} keeps no per-slot state "
                    f"(lockstep mode): use --executor=local"
                )
            self.cheap = decide_placement(cfg, policy) == "worker"
        finally:
            policy.close()
        self.cfg = cfg

    def start(self, run: Run) -> None:
        ray, cfg = self.ray, run.cfg
        started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if cfg.ray.address:
                kwargs["address"] = cfg.ray.address
            else:
                # a local instance for this run: its workers see this process's imports (plugins on sys.path)
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
            ray.init(**kwargs)
            started = True
        res = ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 1)), float(res.get("GPU", 0))
        rc = cfg.ray
        slots = rc.slots_per_actor or (1 if self.cheap else default_slots(cfg.env.step_cost_ms, "driver", 1))
        todo = max(1, len(run.todo))
        actors = rc.actors or max(1, fitting_actors(_node_resources(ray), rc.cpus_per_actor, rc.gpus_per_actor))
        actors = max(1, min(actors, math.ceil(todo / slots)))
        per_call = rc.units_per_call or max(1, min(4 * slots, math.ceil(todo / actors)))
        self.plan = _Plan(cfg.ray.address or "local", started, actors, rc.cpus_per_actor, rc.gpus_per_actor, slots,
                          per_call, choose_backend(cfg.render_device), cpus, gpus)
        log.info("ray: %d actors x %d slots (%.3g CPUs, %.3g GPUs each) on a cluster of %.3g CPUs, %.3g GPUs",
                 actors, slots, rc.cpus_per_actor, rc.gpus_per_actor, cpus, gpus)

    # -- actors ----------------------------------------------------------------------
    def _spawn(self, index: int, generation: int) -> _Actor:
        assert self.plan is not None and self.cfg is not None
        p = self.plan
        remote = self.ray.remote(num_cpus=p.cpus_per_actor, num_gpus=p.gpus_per_actor, max_restarts=0,
                                 concurrency_groups={"watch": 1})(RolloutActor)
        handle = remote.remote(self.cfg, p.slots_per_actor, p.gl_backend, max(1, int(p.cpus_per_actor)),
                               socket.gethostname())
        p.counts["actors_started"] += 1
        return _Actor(index, handle, generation)

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        assert self.plan is not None and self.cfg is not None
        ray, p, max_retries = self.ray, self.plan, self.cfg.eval.max_retries
        queue = UnitQueue(run.todo)
        suspects: list[tuple[EpisodeUnit, int]] = []  # held by an actor that died: each runs alone
        self.actors = [self._spawn(i, 0) for i in range(p.actors)]
        inflight: dict[Any, tuple[_Actor, list[tuple[EpisodeUnit, int]], bool]] = {}
        fruitless = 0

        def give_up_or_retry(unit: EpisodeUnit, attempt: int, error: str, worker: str) -> Iterator[EpisodeRecord]:
            return retry_or_fail(unit, attempt, max_retries, error, worker, queue.retry)

        stops = run.stops
        ready = stops.ready if stops is not None and stops.paces else None  # held back: not yet
        while len(queue) or suspects or inflight:
            if stops is not None:  # an adaptive run's task stopped: its calls in flight finish, unlogged
                if ready is not None and not inflight and len(queue) and not suspects:
                    time.sleep(HELD_POLL_S)  # every unit left is held back (pacing): look again
                    stops.refresh()
                queue.keep(stops.wanted)
                suspects = [s for s in suspects if stops.wanted(s[0])]
            # round-robin, one call per actor per pass, so the first calls spread over all actors
            for level in range(1, IN_FLIGHT + 1):
                for a in self.actors:
                    if a.calls >= level or a.holds_suspect or not (suspects or len(queue)):
                        continue
                    if suspects:
                        if a.calls:
                            continue  # a suspect runs alone on its actor: a death then has one cause
                        batch, alone = [suspects.pop(0)], True
                    else:
                        batch, alone = [], False
                        while len(batch) < p.units_per_call and len(queue):
                            item = queue.take(a.last_task, ready=ready)
                            if item is None:
                                break  # the rest is held back
                            batch.append(item)
                            a.last_task = item[0].task
                        if not batch:
                            continue
                    inflight[a.handle.run.remote(batch)] = (a, batch, alone)
                    a.calls += 1
                    a.holds_suspect = alone
            if not inflight:
                continue  # all that is left is held back
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            self._watch()
            for ref in done:
                a, batch, alone = inflight.pop(ref)
                a.calls -= 1
                a.holds_suspect = False
                try:
                    records, errors, videos, (calls, rows) = ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    # a unit that ran alone explains its actor's death; otherwise nobody is to blame yet
                    fruitless = self._died(a, err, 0 if alone or a.answered else fruitless + 1)
                    for unit, attempt in batch:
                        if not alone:
                            suspects.append((unit, attempt))
                            p.counts["requeued_units"] += 1
                        elif attempt < max_retries:  # it took its actor down alone: that costs it a retry
                            suspects.append((unit, attempt + 1))
                        else:
                            how = a.hung or f"died while running {unit.label()}: {message_line(err)}"
                            cause = f"ray actor {a.index} {how}"
                            yield EpisodeRecord.failed(unit, cause, f"ray{a.index}", attempt)
                    continue
                except ray.exceptions.RayTaskError as err:
                    raise _fatal(err) from None
                a.answered, fruitless = True, 0
                a.policy_calls = self.counts.add_since(a.policy_calls, (calls, rows))  # calls answer out of order
                for relpath, data in videos:  # from an actor on another host: written here, then counted
                    _write_video(self.cfg.output_dir, relpath, data)
                    p.counts["videos_uploaded"] += 1
                yield from records
                for unit, attempt, error in errors:
                    yield from give_up_or_retry(unit, attempt, f"error in ray actor {a.index} on {unit.label()}: {error}",
                                                f"ray{a.index}")

    def _watch(self) -> None:
        """Kill the busy actors whose worker has been silent for longer than
        --eval.step_timeout_s (a hung env); their calls then fail as a death does."""
        assert self.cfg is not None
        limit = self.cfg.eval.step_timeout_s
        for a in self.actors:
            if a.probe is None:
                if a.calls and a.hung is None:
                    a.probe = a.handle.silent_s.options(concurrency_group="watch").remote()
                continue
            done, _ = self.ray.wait([a.probe], timeout=0)
            if not done:
                continue
            probe, a.probe = a.probe, None
            try:
                silent = float(self.ray.get(probe))
            except Exception:  # dead already: its calls say so
                continue
            if a.calls and silent > limit:
                a.hung = f"made no progress for {limit:g}s (--eval.step_timeout_s; hang)"
                log.warning("ray actor %d %s; killing it", a.index, a.hung)
                self.ray.kill(a.handle, no_restart=True)

    def _died(self, a: _Actor, err: Exception, fruitless: int) -> int:
        """Replace a dead actor (once per death); the run stops when an actor cannot start, or
        when fresh actors keep dying with no episode to blame (`fruitless` in a row)."""
        assert self.plan is not None
        current = self.actors[a.index]
        if current.generation != a.generation:
            return fruitless  # an earlier call of the same dead actor already replaced it
        self.plan.counts["actor_deaths"] += 1
        init_failed = bool(getattr(err, "actor_init_failed", False))
        if init_failed or fruitless > MAX_FRUITLESS:
            raise WorkerError(
                f"ray actor {a.index} {'failed to start' if init_failed else 'keeps dying before it answers'}: "
                f"{_cause(err)}"
            )
        log.warning("ray actor %d died (%s); starting a replacement", a.index, message_line(err))
        self.actors[a.index] = self._spawn(a.index, a.generation + 1)
        return fruitless

    def facts(self) -> ExecutionFacts:
        assert self.plan is not None
        return ExecutionFacts("ray", scheduling={"executor": "ray", "placement": "actor",
                                                 **dataclasses.asdict(self.plan)}, policy_calls=self.counts.to_json())

    def describe(self) -> str:
        assert self.plan is not None
        return f"on {self.plan.actors} ray actors"

    def close(self) -> None:
        if self.ray is None:
            return
        for a in self.actors:
            try:
                self.ray.get(a.handle.close.remote(), timeout=120)  # finish its videos, free GL contexts
            except Exception:  # a dead actor has nothing to close
                pass
            self.ray.kill(a.handle)
        self.actors = []
        if self.plan is not None and self.plan.started_cluster:
            self.ray.shutdown()


def check_reachable(address: str, timeout_s: float) -> None:
    """Before `ray.init(address=...)`, which retries an unreachable cluster forever (printing
    GCS warnings): is anything listening at HOST:PORT? Retried until `timeout_s`, then one line.
    `auto` and other forms are left to Ray, which fails fast on them."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise ConfigError(
                    f"--ray.address={address}: no Ray cluster answers at {host}:{port} within {timeout_s:g} s "
                    f"({err.strerror or err}); start one there (`ray start --head --port={port}`), fix the address "
                    f"(auto: the cluster `ray start` runs on this machine; empty: a local one for this run), or "
                    f"raise --ray.connect_timeout_s"
                ) from None
        time.sleep(0.25)


def _node_resources(ray: Any) -> list[dict[str, float]]:
    """CPUs and GPUs of every live node of the cluster."""
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception:  # an older or a restricted cluster: its totals only
        nodes = []
    if not nodes:
        res = ray.cluster_resources()
        return [{"CPU": float(res.get("CPU", 1)), "GPU": float(res.get("GPU", 0))}]
    return [{"CPU": float(n["Resources"].get("CPU", 0)), "GPU": float(n["Resources"].get("GPU", 0))} for n in nodes]


def fitting_actors(nodes: list[dict[str, float]], cpus_per_actor: float, gpus_per_actor: float) -> int:
    """Actors the cluster can place at once, node by node (an actor never spans nodes: two
    nodes of 1.5 CPUs hold two 1-CPU actors, not three)."""
    total = 0
    for node in nodes:
        n = int(node["CPU"] // cpus_per_actor + 1e-9)
        if gpus_per_actor > 0:
            n = min(n, int(node["GPU"] // gpus_per_actor + 1e-9))
        total += max(0, n)
    return total


def _write_video(output_dir: str, relpath: str, data: bytes) -> None:
    path = Path(output_dir) / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
    tmp.write_bytes(data)
    os.replace(tmp, path)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAISED = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit)): (.*)$")


def _cause(err: BaseException) -> str:
    """The innermost `SomeError: message` line of a Ray error's text (its traceback from the
    node), with Ray's where-it-ran suffix; else its first line."""
    lines = _ANSI.sub("", str(err)).splitlines()
    raised = [ln.strip() for ln in lines if _RAISED.match(ln)]
    where = next((ln.strip() for ln in lines if "ip=" in ln or "pid=" in ln), "")
    if raised:
        return raised[-1] + (f" ({where[:200]})" if where else "")
    return message_line(err)


def _fatal(err: Any) -> Exception:
    """An exception raised inside an actor's call: the policy's or a config error stops the
    run as it would locally (the original type, its message)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, (PolicyError, ConfigError, WorkerError)):
        return cause
    return WorkerError(f"ray actor failed: {err}")

