"""How this process runs its units: every scheduling setting decided once, in one place.

    RunConfig + the built policy + the units to run + the render backend
      (+ --workers=auto's recommendation, which fills what the user left unset)  ->  Schedule
      (+ in an `--executor=shards` child: its launcher's `Override`, from `overrides`, used as is)

The `Schedule` is what the schedulers are handed (as `LockstepOptions` or `PoolOptions`)
and what `eval_info.json` records as `scheduling`: the numbers in it are the ones that run
(e.g. `workers` is the number of worker processes the pool starts, never more than the
units need).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rollbench.config.run import RunConfig
from rollbench.episode.video import VideoPlan
from rollbench.errors import ConfigError
from rollbench.rendering import Gpu, assign_gpus, choose_backend, find_gpus, user_backend
from rollbench.scheduler.common import cpu_count, driver_threads
from rollbench.scheduler.lockstep import LockstepOptions
from rollbench.scheduler.pool import PoolOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Schedule:
    """How this process runs its units."""

    mode: str  # continuous | lockstep
    placement: str  # worker | driver: where the policy runs (lockstep: always this process)
    # worker processes started (lockstep: per task runner; 0 with --eval.isolation=none, or
    # with nothing to run) and env slots in each
    workers: int
    slots_per_worker: int
    envs_per_batch: int | None  # lockstep: --eval.batch_size, envs of one task stepped together
    max_rows_per_call: int | None  # continuous, driver placement: --policy.max_batch_size
    use_async_envs: bool  # lockstep, same process: the vector env steps in subprocesses
    gl_backend: str  # MUJOCO_GL of this process and every worker
    isolation: str = "process"  # lockstep: process (envs in env workers) | none (this process)
    # torch intra-op threads of this process while it runs the policy beside the workers: the
    # cores they leave (continuous, driver placement). None: left as they are: lockstep runs
    # the policy as lerobot-eval does, whose per-action parity must hold (docs/architecture.md)
    driver_threads: int | None = None
    worker_threads: int = 1  # OpenMP and torch threads of each worker: 1, or the user's $OMP_NUM_THREADS
    queue_per_slot: int = 1  # continuous: units queued behind each slot's running one
    # why fewer workers run than asked for (--workers, the CPU cores, --ray.actors), or None
    workers_reason: str | None = None

    def lockstep_options(self, cfg: RunConfig) -> LockstepOptions:
        assert self.mode == "lockstep" and self.envs_per_batch is not None
        pool = self._pool(cfg) if self.isolation == "process" and self.workers else None
        return LockstepOptions(self.envs_per_batch, self.use_async_envs, cfg.eval.max_parallel_tasks, video_plan(cfg), pool,
                               cfg.eval.record_mode, step_timeout_s=cfg.eval.step_timeout_s)

    def pool_options(self, cfg: RunConfig) -> PoolOptions:
        assert self.mode == "continuous"
        return self._pool(cfg)

    def _pool(self, cfg: RunConfig) -> PoolOptions:
        return PoolOptions(
            workers=self.workers, slots_per_worker=self.slots_per_worker, placement=self.placement,
            max_retries=cfg.eval.max_retries, step_timeout_s=cfg.eval.step_timeout_s,
            log_dir=Path(cfg.output_dir) / "logs", gl_backend=self.gl_backend, video=video_plan(cfg),
            max_rows_per_call=self.max_rows_per_call, record_mode=cfg.eval.record_mode,
            driver_threads=self.driver_threads, worker_threads=self.worker_threads, queue_per_slot=self.queue_per_slot,
        )


def _user_threads() -> int | None:
    """$OMP_NUM_THREADS, when the user set a whole number."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def video_plan(cfg: RunConfig) -> VideoPlan | None:
    return VideoPlan.for_run(cfg)


def default_slots(step_cost_ms: float, placement: str, workers: int) -> int:
    """Slots per worker.

    Worker placement: 1 — there is no round trip per step, and one slot per worker keeps
    the tail of the run short. Driver placement: enough that a round trip (~0.3 ms for 8
    state envs here) is amortised over the steps of one message, and at least 8 slots over
    all workers, so a network in the driver sees batches, not single rows (measured: a
    LeRobot ACT on PushT pixels ran 2.1x faster at 4 slots than at 1). With 2 or more
    workers the driver alternates between two groups of them (one steps its envs while the
    policy runs for the other), so a call gets about half the slots: 4 rows with 2 workers.
    """
    if placement == "worker":
        return 1
    amortise = math.ceil(1.5 / max(step_cost_ms, 1e-3))
    batch = math.ceil(8 / max(1, workers))
    return max(1, min(16, max(amortise, batch)))


def auto_mode(per_slot_state: bool, same_process: bool = False) -> str:
    """--eval.mode=auto's mode: continuous where the policy keeps per-slot state and the envs
    step in worker processes, else lockstep (tune's model asks the same)."""
    return "continuous" if per_slot_state and not same_process else "lockstep"


def decide_mode(cfg: RunConfig, policy: Any) -> str:
    per_slot = policy.per_slot_state
    same_process = cfg.eval.isolation == "none"
    if same_process and cfg.eval.mode == "continuous":
        raise ConfigError(
            "--eval.isolation=none steps envs in this process, which only lockstep mode does; continuous mode always "
            "steps them in worker processes: use --eval.mode=lockstep (or auto) with it, or drop it"
        )
    if cfg.eval.mode == "auto":
        return auto_mode(per_slot, same_process)
    if cfg.eval.mode == "continuous" and not per_slot:
        raise ConfigError(
            f"--eval.mode=continuous: policy {cfg.policy.type!r} keeps no per-slot state; use --eval.mode=lockstep or auto"
        )
    return cfg.eval.mode


def decide_placement(cfg: RunConfig, policy: Any) -> str:
    if cfg.policy.placement != "auto":
        return cfg.policy.placement
    return "worker" if getattr(policy, "cheap", False) and cfg.policy.device == "cpu" else "driver"


@dataclass(frozen=True)
class Cluster:
    """A fixed set of env workers that an executor starts elsewhere, as `decide` sees it: Ray's
    actors (`--executor=ray`), or a plugin transport's workers. `actors` of them fit,
    `cpus_per_actor` cores apiece, each with its own policy (or only envs, for the driver's,
    under driver placement). What the user asked of them comes with it, named by the flags
    that asked (Ray's: `--ray.actors`, `--ray.slots_per_actor`, `--ray.queue_per_slot`; a
    plugin's: `--workers`, `--slots_per_worker`), so `decide` reads no executor's flags.
    `actors=None`: as many as fit on `nodes` (each node's CPU and GPU, `fitting_actors`)."""

    actors: int | None
    cpus_per_actor: float
    slots_per_actor: int | None = None  # asked for; None: from the benchmark's step cost
    queue_per_slot: int = 1  # units queued behind each slot's running one
    actors_flag: str | None = None  # the flag that asked for `actors` (e.g. "--ray.actors=8"), if one did
    slots_flag: str = "--slots_per_worker"  # the flag that sets `slots_per_actor`
    gpus_per_actor: float = 0.0  # with `nodes`: a node holds no more actors than its GPUs allow
    nodes: tuple[dict[str, float], ...] = ()


def fitting_actors(nodes: Sequence[dict[str, float]], cpus_per_actor: float, gpus_per_actor: float) -> int:
    """Actors a cluster can place at once, node by node (an actor never spans nodes: two
    nodes of 1.5 CPUs hold two 1-CPU actors, not three)."""
    total = 0
    for node in nodes:
        n = int(node["CPU"] // cpus_per_actor + 1e-9)
        if gpus_per_actor > 0:
            n = min(n, int(node["GPU"] // gpus_per_actor + 1e-9))
        total += max(0, n)
    return total


class Recommended(Protocol):
    """What `decide` reads of `rollbench tune`'s recommendation (tune.model.Recommendation)."""

    @property
    def mode(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def slots_per_worker(self) -> int: ...
    @property
    def envs_per_batch(self) -> int | None: ...
    @property
    def max_rows_per_call(self) -> int | None: ...
    @property
    def use_async_envs(self) -> bool: ...
    @property
    def render_device(self) -> str: ...


@dataclass(frozen=True)
class Tuned:
    """A recommendation as `decide` reads it (`Recommended`), and as it travels as JSON."""

    mode: str
    workers: int
    slots_per_worker: int
    envs_per_batch: int | None
    max_rows_per_call: int | None
    use_async_envs: bool
    render_device: str

    @classmethod
    def of(cls, rec: Recommended) -> Tuned:
        return cls(*(getattr(rec, f.name) for f in dataclasses.fields(cls)))


@dataclass(frozen=True)
class Override:
    """What an `--executor=shards` launcher decides once for one of its shard children
    (`overrides`), handed to the child as JSON; the child's `decide` uses it as is."""

    shard_id: int
    gl_backend: str  # MUJOCO_GL of the child and its workers
    gpu: int | None = None  # the one GPU the child sees (with two or more)
    workers: int | None = None  # the child's share of the cores; None: --workers or `tuned`'s
    tuned: Tuned | None = None  # --workers=auto: the recommendation for one shard, measured once by the launcher

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Override:
        return cls(**{**data, "tuned": data["tuned"] and Tuned(**data["tuned"])})


def overrides(cfg: RunConfig, rec: Recommended | None = None, gpus: Sequence[Gpu] | None = None) -> list[Override]:
    """The shard children's part of an `--executor=shards` run, one decision for all of them: the
    render backend (a MUJOCO_GL the user set wins, as in one process), a GPU each round-robin
    (with two or more), and a share of the cores each where the user asked for no number
    (`rec`: --workers=auto's recommendation for one shard's share, which each child applies
    as one process does, `tuned`)."""
    n = cfg.eval.num_shards
    gpus = (find_gpus() if cfg.render_device != "cpu" else []) if gpus is None else gpus
    gl = choose_backend(cfg.render_device, gpus)
    workers = None if isinstance(cfg.workers, int) or rec else max(1, cpu_count() // n)
    tuned = None if rec is None else Tuned.of(rec)
    return [Override(k, gl, None if g is None else g.index, workers, tuned) for k, g in enumerate(assign_gpus(gpus, n))]


def tuned(cfg: RunConfig, rec: Recommended | None) -> RunConfig:
    """The settings `decide` schedules with: the user's, with --workers=auto's recommendation
    where the user left a setting unset (a MUJOCO_GL the user set keeps winning). The run's
    config itself is never rewritten: eval_info.json records what the user asked for, and
    `scheduling` what ran."""
    if rec is None:
        return cfg
    changes: dict[str, Any] = {"workers": rec.workers}
    eval_changes: dict[str, Any] = {}
    if rec.mode == "continuous":
        changes["slots_per_worker"] = cfg.slots_per_worker or rec.slots_per_worker
        if rec.max_rows_per_call is not None and cfg.policy.max_batch_size is None:
            changes["policy"] = dataclasses.replace(cfg.policy, max_batch_size=rec.max_rows_per_call)
    else:
        if cfg.eval.batch_size is None:
            eval_changes["batch_size"] = rec.envs_per_batch
        if cfg.eval.isolation == "none" and not cfg.eval.use_async_envs:
            eval_changes["use_async_envs"] = rec.use_async_envs
    if cfg.render_device == "auto" and user_backend() is None:
        changes["render_device"] = rec.render_device
    if eval_changes:
        changes["eval"] = dataclasses.replace(cfg.eval, **eval_changes)
    return dataclasses.replace(cfg, **changes)


def decide(cfg: RunConfig, policy: Any, n_units: int, rec: Recommended | None = None,
           override: Override | None = None, cluster: Cluster | None = None) -> Schedule:
    """The schedule for running `n_units` units of `cfg` with `policy` (already built), and
    the render backend of this process and its workers, decided here once (`override`: what
    a shard launcher decided for this child, in place of those; `cluster`: the workers are
    Ray actors)."""
    asked = f"--workers={cfg.workers}" if cfg.workers is not None else None
    if override is not None:
        cfg = dataclasses.replace(cfg, workers=override.workers or cfg.workers)
        rec = override.tuned
    cfg = tuned(cfg, rec)
    gl_backend = override.gl_backend if override is not None else choose_backend(cfg.render_device)
    threads = _user_threads() or 1
    mode = decide_mode(cfg, policy)
    if cluster is not None:  # workers the executor starts elsewhere
        return _on_cluster(cfg, policy, n_units, mode, gl_backend, cluster)
    if mode == "lockstep":
        envs = cfg.eval.envs_per_batch
        if cfg.eval.batch_size is not None and cfg.eval.batch_size > cfg.eval.n_episodes:
            log.warning("--eval.batch_size=%d is larger than --eval.n_episodes=%d; using %d",
                        cfg.eval.batch_size, cfg.eval.n_episodes, envs)
        bound = cfg.policy.max_batch_size
        if bound is not None and bound < envs:
            raise ConfigError(
                f"--policy.max_batch_size={bound} is smaller than the lockstep batch of {envs} envs; in lockstep mode "
                f"every policy call takes one row per env of the batch: lower --eval.batch_size instead"
            )
        if cfg.eval.isolation == "none":
            return Schedule("lockstep", "driver", 0, 0, envs, None, cfg.eval.use_async_envs, gl_backend, "none",
                            worker_threads=threads)
        if cfg.eval.use_async_envs:
            log.info("--eval.use_async_envs: the batch's envs already step in env worker processes "
                     "(--eval.isolation=process); it only picks AsyncVectorEnv with --eval.isolation=none")
        # the envs of a batch spread over the workers of its task runner (one per parallel task)
        requested = cfg.workers if isinstance(cfg.workers, int) else cpu_count()
        workers = max(1, min(envs, requested // cfg.eval.max_parallel_tasks)) if n_units else 0
        slots = math.ceil(envs / workers) if workers else 0
        reason = (_fewer(asked, requested, workers, f"a lockstep batch holds {envs} envs, one at least per worker")
                  if 0 < workers < requested // cfg.eval.max_parallel_tasks else None)
        return Schedule("lockstep", "driver", workers, slots, envs, None, False, gl_backend, "process",
                        worker_threads=threads, workers_reason=reason)
    if cfg.eval.batch_size is not None:
        log.warning(
            "--eval.batch_size=%d sets the envs of a lockstep batch (lerobot-eval's meaning); continuous mode runs "
            "--workers x --slots_per_worker slots instead. To bound the rows of a policy call use --policy.max_batch_size",
            cfg.eval.batch_size,
        )
    placement = decide_placement(cfg, policy)
    requested = cfg.workers if isinstance(cfg.workers, int) else cpu_count()
    slots = cfg.slots_per_worker or default_slots(cfg.env.step_cost_ms, placement, requested)
    # never more workers than the units can keep busy: each worker takes at least one unit
    workers = min(requested, math.ceil(n_units / slots))
    reason = (_fewer(asked, requested, workers, f"the {n_units} episodes to run fit in {workers} x {slots} slots "
                     f"(--slots_per_worker={slots})") if 0 < workers < requested else None)
    rows = cfg.policy.max_batch_size if placement == "driver" else None
    driving = driver_threads(cpu_count(), workers) if placement == "driver" else None
    return Schedule("continuous", placement, workers, slots, None, rows, False, gl_backend,
                    driver_threads=driving, worker_threads=threads, workers_reason=reason)


def _fewer(asked: str | None, requested: int, workers: int, because: str, what: str = "workers") -> str:
    """Why `workers` run where `requested` could: recorded in the schedule, and said once (info)
    when the user asked for `requested` (`asked`: the flag; None: a default, the CPU cores)."""
    reason = f"running {workers} of {requested} {what}: {because}"
    if asked is not None:
        log.info("%s: %s", asked, reason)
    return reason


def check_cluster_mode(cfg: RunConfig, mode: str) -> None:
    if mode != "continuous":
        raise ConfigError(
            f"--executor={cfg.executor} runs continuous batching; policy {cfg.policy.type!r} keeps no per-slot state "
            f"(lockstep mode): use --executor=local"
        )


def _on_cluster(cfg: RunConfig, policy: Any, n_units: int, mode: str, gl_backend: str, cluster: Cluster) -> Schedule:
    """Ray actors as the workers. Each runs its own policy beside its slots (1 slot for a
    cheap CPU policy, else enough rows per call to batch), one thread per reserved CPU; or,
    with --policy.placement=driver, only envs, for the one policy in this process (a GPU
    here, envs on CPU nodes), whose observations come pickled."""
    check_cluster_mode(cfg, mode)
    actors = cluster.actors or max(1, fitting_actors(cluster.nodes, cluster.cpus_per_actor, cluster.gpus_per_actor))
    if cfg.policy.placement == "driver":
        slots = cluster.slots_per_actor or default_slots(cfg.env.step_cost_ms, "driver", actors)
        placement = "driver"
    else:
        cheap = decide_placement(cfg, policy) == "worker"
        slots = cluster.slots_per_actor or (1 if cheap else default_slots(cfg.env.step_cost_ms, "driver", 1))
        placement = "worker"
    workers = max(1, min(actors, math.ceil(max(1, n_units) / slots)))
    reason = None
    if workers < actors:
        because = f"the {n_units} episodes to run fit in {workers} x {slots} slots ({cluster.slots_flag}={slots})"
        reason = _fewer(cluster.actors_flag, actors, workers, because, "actors")
    return Schedule("continuous", placement, workers, slots, None, cfg.policy.max_batch_size if placement == "driver" else None,
                    False, gl_backend, worker_threads=max(1, int(cluster.cpus_per_actor)),
                    queue_per_slot=cluster.queue_per_slot, workers_reason=reason)
