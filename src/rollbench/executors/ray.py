"""`--executor=ray`: the run's units spread over rollout actors on a Ray cluster.

    driver (this process)                                   actor i (a Ray worker process)
    the continuous scheduler, as for the local executor  ─push(seq, msg)─▶  inbox ─▶ rollbench's env
      (UnitQueue, slots, retries, stops, pacing)                           Worker, in a thread of its
    WorkerPool over `RayTransport`                       ◀─pull()─────────  own: K slots, its policy,
      one pull in flight per actor (ray.wait)              (messages,       envs kept warm
    lifecycle appends each record to the durable log        heartbeat)

Ray is a transport under the continuous driver (`scheduler/pool.py: Transport`): an actor
is the same `Worker` a local worker process runs, fed the same messages, so an episode is
the same function of (task, episode index, seed, policy) and the deaths, hangs, retries,
requeues, adaptive stops and pacing are the local executor's code. What differs:

- Messages go by `push` (numbered: Ray does not keep the order of a threaded actor's calls)
  and come back by `pull`, which waits up to a second for the worker's messages and says
  how long the worker has been silent and which slot it is inside of. A hung env thus shows
  as a silence past `--eval.step_timeout_s` while the pulls keep answering, and the hung
  slot is known: the actor is killed and that unit charged.
- An actor that dies (SIGKILL, segfault, a lost node) takes its mark with it, so the pool
  cannot tell which of its episodes killed it: the unit at the head of each slot becomes a
  suspect and runs again alone on an actor (a suspect whose actor dies uses up a retry),
  the others run again without penalty. One slot per actor (cheap policies) charges the
  one unit at once.
- An actor that fails in `__init__` (a package missing on a node) stops the run once, with
  the node's innermost error line.
- Videos of an actor on another host (`--ray.upload_videos`) come back in its report, and
  the driver writes them before their records reach the log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import queue
import re
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError, PolicyError, RollbenchError, WorkerError, message_line
from rollbench.executors.base import Executor, Run
from rollbench.policies.base import Policy
from rollbench.rendering import apply_backend
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.records import EpisodeRecord
from rollbench.scheduler.continuous import ContinuousScheduler
from rollbench.scheduler.decide import Cluster, Schedule, check_cluster_mode, decide, decide_mode
from rollbench.scheduler.pool import Link, WorkerPool
from rollbench.scheduler.shm import SlotBuffer, shm_dir
from rollbench.scheduler.worker import Report, Worker, WorkerSpec

log = logging.getLogger(__name__)

#: how long an actor's `pull` waits for its worker's messages before it answers with none
PULL_S = 1.0


def _import_ray() -> Any:
    try:
        import ray  # optional: ray (the ray extra)
    except ImportError:
        raise ConfigError("--executor=ray needs Ray; install it with `pip install 'rollbench[ray]'`") from None
    return ray


class _Channel:
    """The pipe of an env worker inside its actor: the worker's end (recv, poll, send)."""

    def __init__(self, actor: RolloutActor) -> None:
        self.actor = actor
        self.inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.outbox: queue.Queue[tuple[Any, ...]] = queue.Queue()

    def poll(self) -> bool:
        return not self.inbox.empty()

    def recv(self) -> tuple[Any, ...]:
        return self.inbox.get()

    def send(self, msg: tuple[Any, ...]) -> None:
        if msg[0] in ("report", "stepped") and self.actor.upload:  # worker and driver placement
            msg = (*msg, self.actor.videos(msg[1]))
        self.outbox.put(msg)


class RolloutActor:
    """One env worker with its slots and its own policy, in a Ray actor process: the
    worker's loop runs in a thread of its own, fed by `push` and read by `pull`."""

    def __init__(self, spec: WorkerSpec, upload: str, driver_host: str, output_dir: str) -> None:
        apply_backend(spec.gl_backend)  # before anything here imports MuJoCo
        os.environ.setdefault("OMP_NUM_THREADS", str(spec.threads))
        # named by this actor's pid: a killed actor's file is removed by the next run's sweep_shm
        fd, path = tempfile.mkstemp(prefix=f"rollbench-{os.getpid()}-ray-", suffix=".buf", dir=shm_dir())
        os.close(fd)
        SlotBuffer(None, spec.n_slots, path, create=True)
        self.buffer_path = path
        self.watch = SlotBuffer(None, spec.n_slots, path)  # the worker's heartbeat and the slot it is inside of
        self.upload = upload == "true" or (upload == "auto" and socket.gethostname() != driver_host)
        self.output_dir = output_dir
        self.channel = _Channel(self)
        self.lock = threading.Lock()
        self.next_seq = 0
        self.early: dict[int, tuple[Any, ...]] = {}
        # the policy is built here: one that cannot be (a package missing on this node) fails the actor's start
        self.worker = Worker(dataclasses.replace(spec, buffer_path=path, log_path=os.devnull), self.channel)
        self.worker.name = f"ray-{os.getpid()}"
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(spec.threads)
        self.worker.buffer.touch()
        self.thread = threading.Thread(target=self._loop, name="rollbench-worker", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            self.worker.run()
        except RollbenchError as err:
            self.channel.outbox.put(("fatal", str(err), type(err).__name__))
        except Exception as err:
            text = f"ray actor {self.where()} failed: {type(err).__name__}: {err}\n{traceback.format_exc()}"
            self.channel.outbox.put(("fatal", text, "WorkerError"))

    def where(self) -> str:
        return f"{socket.gethostname()} pid {os.getpid()}"

    def push(self, seq: int, msg: tuple[Any, ...]) -> None:
        """The driver's message number `seq`, handed to the worker in the driver's order."""
        with self.lock:
            self.early[seq] = msg
            while self.next_seq in self.early:
                self.channel.inbox.put(self.early.pop(self.next_seq))
                self.next_seq += 1

    def pull(self, wait_s: float) -> tuple[list[tuple[Any, ...]], float, int, str]:
        """The worker's messages (waiting up to `wait_s` for the first), the seconds since
        its last sign of life, the slot it is inside a reset or step of (-1: none), and
        where it runs."""
        out = []
        try:
            out.append(self.channel.outbox.get(timeout=wait_s))
            while True:
                out.append(self.channel.outbox.get_nowait())
        except queue.Empty:
            pass
        return out, time.monotonic() - float(self.watch.beat[0]), int(self.watch.current[0]), self.where()

    def videos(self, report: Report) -> list[tuple[str, bytes]]:
        """The finished videos of the report's records, read and removed here (the driver
        writes them); called in the worker's thread, which owns the recorder."""
        paths = [e[2].video_path for e in report.events if e[0] == "record" and e[2].video_path]
        if not paths or self.worker.filming is None:
            return []
        self.worker.filming.close()  # wait until they are encoded (the recorder restarts on the next frame)
        out = []
        for rel in paths:
            path = Path(self.output_dir) / rel
            try:
                out.append((rel, path.read_bytes()))
                path.unlink()
            except OSError:  # the recorder failed on it: the report lists only videos that exist
                pass
        return out

    def close(self) -> None:
        """Wait for the worker's loop to end (its `stop` came by `push`: it finishes its
        videos and closes its envs), then clean up."""
        self.thread.join(timeout=120)
        try:
            os.unlink(self.buffer_path)
        except OSError:
            pass


@dataclass
class RayLink:
    """One rollout actor as the pool sees it."""

    transport: RayTransport
    index: int
    handle: Any
    pulling: Any = None  # the `pull` call in flight
    pushes: list[Any] = field(default_factory=list)  # `push` calls not yet seen done
    seq: int = 0
    sign: float = math.inf  # this process's clock; not judged before its first answer
    slot_inside: int = -1
    death: str = ""
    at: str = "not started"  # its host and pid, from its first answer
    buffer: SlotBuffer | None = None

    @property
    def name(self) -> str:
        return f"ray actor {self.index}"

    @property
    def tag(self) -> str:
        return f"ray{self.index}"

    @property
    def logged_to(self) -> str:
        return "the Ray logs of its node"

    def send(self, msg: tuple[Any, ...]) -> None:
        self.pushes.append(self.handle.push.options(concurrency_group="push").remote(self.seq, msg))
        self.seq += 1
        if len(self.pushes) >= 64:  # forget those done
            done, self.pushes = self.transport.ray.wait(self.pushes, num_returns=len(self.pushes), timeout=0)
            _fetch(self.transport.ray, done, 0)

    def pull(self) -> None:
        self.pulling = self.handle.pull.options(concurrency_group="pull").remote(PULL_S)

    def last_sign(self) -> float:
        return self.sign

    def inside(self, hung: bool) -> int | None:
        # a hung worker is still inside the slot its last pull named; a dead one's mark died with it
        return self.slot_inside if hung else None

    def stop(self, kill: bool = False) -> None:
        ray = self.transport.ray
        if not kill:
            self.send(("stop",))  # after every message before it
            try:
                ray.get(self.handle.close.remote(), timeout=130)  # its videos finished, GL contexts freed
            except Exception:  # a dead actor has nothing to close
                pass
        ray.kill(self.handle, no_restart=True)
        _fetch(ray, [*self.pushes, self.pulling], 5)
        self.pushes = []

    def ended(self) -> tuple[str, str]:
        return (f"died ({self.death})" if self.death else "stopped answering"), ""


class RayTransport:
    """The pool's workers as Ray actors (`RolloutActor`)."""

    shared_memory = False  # observations come pickled (driver placement: in the actors' replies)

    def __init__(self, ray: Any, cpus: float, gpus: float, upload: str, output_dir: str) -> None:
        self.ray = ray
        # one actor class for the run (each `ray.remote` makes a new class for Ray to export)
        self.actor_class = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0,
                                      concurrency_groups={"push": 1, "pull": 1})(RolloutActor)
        self.upload = upload
        self.output_dir = output_dir
        self.counts = {"actors_started": 0, "videos_uploaded": 0}

    def open(self, pool: WorkerPool) -> None:
        pass

    def spawn(self, pool: WorkerPool, spec: WorkerSpec, old: Link | None) -> RayLink:
        handle = self.actor_class.remote(spec, self.upload, socket.gethostname(), self.output_dir)
        self.counts["actors_started"] += 1
        link = RayLink(self, spec.index, handle)
        link.pull()
        return link

    def wait(self, links: list[Link], timeout: float) -> Iterator[tuple[Link, tuple[Any, ...]]]:
        ray = self.ray
        by_ref = {}
        for link in links:
            assert isinstance(link, RayLink)
            by_ref[link.pulling] = link
        done, rest = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if done and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            done += more
        for ref in done:
            link = by_ref[ref]
            try:
                msgs, silent, inside, link.at = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                if getattr(err, "actor_init_failed", False):
                    yield link, ("fatal", f"ray actor {link.index} failed to start: {_cause(err)}", "WorkerError")
                    continue
                link.death = _cause(err)
                yield link, ("lost", "")
                continue
            except ray.exceptions.RayTaskError as err:
                raise _fatal(err) from None
            link.sign = time.monotonic() - float(silent)
            link.slot_inside = int(inside)
            link.pull()
            for msg in msgs:
                if msg[0] in ("report", "stepped") and len(msg) == 3:
                    for relpath, data in msg[2]:  # from an actor on another host: written here, then logged
                        _write_video(self.output_dir, relpath, data)
                        self.counts["videos_uploaded"] += 1
                    msg = msg[:2]
                yield link, msg

    def close(self, links: list[Link]) -> None:
        for link in links:
            link.stop()


@dataclass
class _Cluster:
    """The cluster the run is on (its share of `scheduling` beside the `Schedule`)."""

    address: str
    started_cluster: bool
    actors: int
    cpus_per_actor: float
    gpus_per_actor: float
    cluster_cpus: float
    cluster_gpus: float


class RayExecutor(Executor):
    def __init__(self) -> None:
        self.cfg: RunConfig | None = None
        self.ray: Any = None
        self.ctx: StepContext | None = None
        self.policy: Policy | None = None  # built in setup: its traits; worker placement: each actor builds its own
        self.cluster: _Cluster | None = None
        self.schedule: Schedule | None = None
        self.transport: RayTransport | None = None
        self.scheduler: ContinuousScheduler | None = None

    def setup(self, cfg: RunConfig) -> None:
        if cfg.workers == "auto":
            raise ConfigError("--workers=auto is for the local executor; with --executor=ray set --ray.actors "
                              "and --ray.cpus_per_actor (rollbench tune does not measure clusters yet)")
        self.ray = _import_ray()
        if cfg.ray.address and not self.ray.is_initialized():
            check_reachable(cfg.ray.address, cfg.ray.connect_timeout_s)
        self.ctx = StepContext.of_run(cfg)
        self.policy = self.ctx.make_policy()  # a bad policy fails here, before any output
        check_cluster_mode(cfg, decide_mode(cfg, self.policy))  # a lockstep-only one too, before Ray starts
        self.cfg = cfg

    def start(self, run: Run) -> None:
        assert self.policy is not None
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
            _join(ray, kwargs, cfg.ray.address)
            started = True
        res = ray.cluster_resources()
        rc = cfg.ray
        asked = f"--ray.actors={rc.actors}" if rc.actors is not None else None
        cluster = Cluster(rc.actors, rc.cpus_per_actor, rc.slots_per_actor, rc.queue_per_slot, asked, "--ray.slots_per_actor",
                          rc.gpus_per_actor, tuple(_node_resources(ray)))
        self.schedule = decide(cfg, self.policy, len(run.todo), cluster=cluster)
        if self.schedule.placement == "worker":
            self.policy.close()  # every actor builds its own
            self.policy = None
        self.cluster = _Cluster(cfg.ray.address or "local", started, self.schedule.workers, rc.cpus_per_actor,
                                rc.gpus_per_actor, float(res.get("CPU", 1)), float(res.get("GPU", 0)))
        log.info("ray: %d actors x %d slots (%.3g CPUs, %.3g GPUs each) on a cluster of %.3g CPUs, %.3g GPUs",
                 self.schedule.workers, self.schedule.slots_per_worker, rc.cpus_per_actor, rc.gpus_per_actor,
                 self.cluster.cluster_cpus, self.cluster.cluster_gpus)

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        assert self.schedule is not None and self.cfg is not None and self.ctx is not None
        cfg, rc = self.cfg, self.cfg.ray
        self.ctx.counts.calls = self.ctx.counts.rows = 0
        self.transport = RayTransport(self.ray, rc.cpus_per_actor, rc.gpus_per_actor, rc.upload_videos, cfg.output_dir)
        opts = self.schedule.pool_options(cfg)
        self.scheduler = ContinuousScheduler(self.ctx, run.todo, opts, self.policy, run.stops, transport=self.transport)
        return self.scheduler.run()

    def facts(self) -> ExecutionFacts:
        assert self.schedule is not None and self.cluster is not None and self.ctx is not None
        counts = {"actors_started": 0, "actor_deaths": 0, "requeued_units": 0, "videos_uploaded": 0}
        if self.transport is not None and self.scheduler is not None:
            counts.update(self.transport.counts, actor_deaths=self.scheduler.counts["worker_deaths"],
                          requeued_units=self.scheduler.counts["requeued_units"])
        return ExecutionFacts("ray", scheduling=dataclasses.asdict(self.schedule),
                              detail={**dataclasses.asdict(self.cluster), "counts": counts},
                              policy_calls=self.ctx.counts.to_json())

    def describe(self) -> str:
        assert self.schedule is not None
        return f"on {self.schedule.workers} ray actors"

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()
            self.policy = None
        if self.ray is not None and self.cluster is not None and self.cluster.started_cluster:
            self.ray.shutdown()


#: what a gRPC server (Ray's GCS, a Ray Client server) is sent first: HTTP/2's client preface and
#: an empty SETTINGS frame; it answers with a SETTINGS frame of its own
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def check_reachable(address: str, timeout_s: float) -> None:
    """Before `ray.init(address=...)`, which retries an address nobody answers at forever and one
    where something else answers for ~20 s, printing GCS warnings all along: does a gRPC server
    (Ray's) answer at HOST:PORT? Retried until `timeout_s`, then one line naming what answered.
    `auto` is left to Ray, which fails fast on it."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit():
        return
    flag, where = f"--ray.address={address}", f"{host}:{port}"
    todo = (f"start one there (`ray start --head --port={port}`) or fix the address (auto: the cluster `ray start` "
            f"runs on this machine; empty: a local one for this run)")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            break
        except OSError as err:
            if time.monotonic() >= deadline:
                raise ConfigError(f"{flag}: no Ray cluster answers at {where} within {timeout_s:g} s "
                                  f"({err.strerror or err}); {todo}, or raise --ray.connect_timeout_s") from None
        time.sleep(0.25)
    with conn:  # a GCS answers within milliseconds: a connect that took the whole timeout still gets a moment
        answer, silent = _h2_answer(conn, max(deadline, time.monotonic() + min(2.0, timeout_s)))
    if len(answer) >= 9 and answer[3] == _H2_SETTINGS:
        return
    if silent:
        what = f"accepts connections but did not answer as a Ray cluster within {timeout_s:g} s"
    elif answer:
        what = f"answered {bytes(answer[:24])!r}, which is not Ray's (gRPC)"
    else:
        what = "closed the connection without answering as a Ray cluster would"
    raise ConfigError(f"{flag}: something at {where} {what}: is it the port of another service? Give the port of the "
                      f"cluster's head (`ray start --head` printed it; 6379 by default), {todo}")


def _h2_answer(conn: socket.socket, deadline: float) -> tuple[bytes, bool]:
    """What the server on `conn` answers HTTP/2's preface with (its first frame header, or what
    it sent instead) by `deadline`; and whether it was silent until then."""
    answer = b""
    try:
        conn.sendall(_H2_PREFACE)
        while len(answer) < 9:
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = conn.recv(64)
            if not chunk:
                return answer, False
            answer += chunk
    except TimeoutError:
        return answer, not answer
    except OSError:
        pass
    return answer, False


@contextlib.contextmanager
def _ray_output_to_debug_log() -> Iterator[None]:
    """Ray's start-up writes (its C++ core's GCS warnings, its INFO lines) to file descriptor 2:
    caught while `ray.init` runs and logged at debug level (`--debug` shows them), so the
    terminal shows rollbench's lines only."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines():
                if line.strip():
                    log.debug("ray: %s", line)


def _join(ray: Any, kwargs: dict[str, Any], address: str) -> None:
    """`ray.init(**kwargs)`, its output in the debug log; failing to join the cluster at --ray.address
    is one line naming it."""
    try:
        with _ray_output_to_debug_log():
            ray.init(**kwargs)
    except Exception as err:  # Ray's ConnectionError, its own exceptions: one line, where the user named a cluster
        if not address:
            raise
        raise ConfigError(f"--ray.address={address}: Ray could not join the cluster there ({type(err).__name__}: "
                          f"{message_line(err)}); check that `ray status --address={address}` answers on this "
                          f"machine, that both run the same Ray version, or leave --ray.address empty for a "
                          f"local instance (--debug shows Ray's log)") from None


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


def _fetch(ray: Any, refs: list[Any], timeout: float) -> None:
    """Fetch `refs`, errors and all: Ray logs the errors nobody fetched as "unhandled"."""
    for ref in refs:
        try:
            ray.get(ref, timeout=timeout)
        except Exception:  # a dead actor's calls: its death is handled already
            pass


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

