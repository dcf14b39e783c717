"""`rollbench tune`: measure this machine for one evaluation and recommend how to run it.

    probe (probe.py: machine, env in worker-like processes, policy here)
      -> Probe (figures.py: every number marked measured or estimated)
      -> recommend (model.py: workers, slots, batch bound, render device, AMP, shards)
      -> a report, a paste-ready `rollbench eval` command and a JSON file

`rollbench eval --workers=auto` reuses a stored probe of this machine, benchmark and policy
(cache.py), or probes within ~10% of the run's predicted wall (budget.py), or reads
`--tune.load`, and uses the recommendation's scheduling settings; settings that would change
results (AMP) are only suggested. Both say in one line what they did.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import shlex
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollbench.config.codec import TUNED_FLAGS, to_argv, to_flags, without
from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError
from rollbench.plan import EpisodeUnit, plan_for, shard
from rollbench.policies.base import Policy
from rollbench.rendering import check_user_backend, choose_backend, osmesa_loadable, user_backend
from rollbench.scheduler.common import cpu_count
from rollbench.scheduler.shm import obs_layout
from rollbench.tune.figures import (
    SCHEMA,
    EnvProbe,
    MachineProbe,
    PolicyProbe,
    Probe,
    RunShape,
    estimated,
    measured,
)
from rollbench.tune.model import Recommendation, recommend

__all__ = ["Probe", "Recommendation", "eval_command", "load", "measure", "prediction", "recommend", "report", "save"]

log = logging.getLogger(__name__)

# What a probe process does not need is imported inside the functions that use it: probe
# processes (probe_process.py) import this package and should load what a worker loads, no more.


def run_shape(cfg: RunConfig, n_units: int) -> RunShape:
    tasks = [t for names in cfg.env.tasks().values() for t in names]
    return RunShape(
        n_units=n_units, n_tasks=len(tasks), n_episodes=cfg.eval.n_episodes,
        videos_per_task=cfg.eval.max_episodes_rendered, device=cfg.policy.device, mode=cfg.eval.mode,
        same_process=cfg.eval.isolation == "none",
        placement=cfg.policy.placement, render_device=cfg.render_device, renders_obs=cfg.env.renders_obs,
    )


def measure(cfg: RunConfig, policy: Policy | None = None, load_s: float = 0.0, rss_before: int = 0,
            budget_s: float | None = None, wall_share: float | None = None) -> Probe:
    """Probe the machine, the env and the policy for `cfg`, within `budget_s` (default
    `cfg.tune.budget_s`). With `wall_share`, the measurement windows stop at that share of
    the wall predicted from the warm-up (less what was spent): `--workers=auto`."""
    from rollbench.scheduler.decide import decide_placement  # lazy: keeps probe processes light
    from rollbench.tune import probe as p  # lazy: keeps probe processes light
    from rollbench.tune.env_probe import probe_env  # lazy: keeps probe processes light

    started = time.monotonic()
    budget = cfg.tune.budget_s if budget_s is None else budget_s
    machine = p.probe_machine()
    units = _units_to_probe(cfg)
    if policy is None:
        rss_before = p.rss_now()
        t0 = time.perf_counter()
        policy = StepContext(cfg.env, cfg.policy, cfg.seed).make_policy()
        load_s = time.perf_counter() - t0
        started = time.monotonic()  # the budget is for measuring; loading is the policy's own cost
    placement = decide_placement(cfg, policy)
    backend, other = _render_backends(cfg, machine)
    with_policy = placement == "worker"
    env_share = 0.55 if not with_policy else 0.8  # the rest times the policy in this process
    shape = run_shape(cfg, len(units))
    unmeasured = _unmeasured_policy(cfg, placement, policy.per_slot_state, load_s)
    window_budget = _window_budget(machine, unmeasured, shape, budget, env_share, wall_share, started)
    # the parallel measurement runs as many processes as the run will most likely start
    n_parallel = max(1, min(int(machine.cores.v), len(units)))
    env, obs = probe_env(cfg, units, budget * env_share, backend, with_policy, cfg.eval.max_episodes_rendered > 0,
                         n_parallel, other if budget >= 10.0 else None, window_budget)
    env = dataclasses.replace(env, driver_setup_s=_driver_setup(cfg))
    left = budget - (time.monotonic() - started)
    floor = 1.0 if wall_share is None else 0.2
    pol = p.probe_policy(cfg, policy, load_s, rss_before, obs, units[0], max(floor, left),
                         p.max_useful_batch(len(units), int(machine.cores.v)), placement)
    return Probe(
        machine=machine, env=env, policy=pol, run=shape, schema=SCHEMA,
        took_s=time.monotonic() - started, host=socket.gethostname(), budget_s=budget,
    )


def _units_to_probe(cfg: RunConfig) -> list[EpisodeUnit]:
    """The episode units of this shard, once the env and the render backend are checked; a
    ConfigError when the shard has none."""
    cfg.env.check_available()
    check_user_backend(cfg.env, cfg.eval.max_episodes_rendered)
    units = shard(plan_for(cfg), cfg.eval.shard_id, cfg.eval.num_shards)
    if not units:
        raise ConfigError(f"--eval.shard_id={cfg.eval.shard_id}: this shard has no episodes to run")
    return units


def _render_backends(cfg: RunConfig, machine: MachineProbe) -> tuple[str, str | None]:
    """The render backend the run would use, and the other one to time beside it (None: none)."""
    # the backend the run would use (the run decides its own, once, after the recommendation);
    # on a CPU machine with no choice made by the user, the other one is timed too
    backend = choose_backend(cfg.render_device)
    renders = cfg.env.renders_obs or cfg.eval.max_episodes_rendered > 0
    other = None
    if renders and cfg.render_device == "auto" and not machine.gpus and user_backend() is None:
        other = "egl" if backend == "osmesa" else ("osmesa" if osmesa_loadable() else None)
    return backend, other


def _unmeasured_policy(cfg: RunConfig, placement: str, per_slot_state: bool, load_s: float) -> PolicyProbe:
    """The policy's figures before it is measured: its load time, and placeholders for the rest."""
    return PolicyProbe(type=cfg.policy.type, device=cfg.policy.device, placement=placement,
                       per_slot_state=per_slot_state, load_s=estimated(load_s, "built before the probe"),
                       param_bytes=estimated(0.0, "not yet"), rss_bytes=estimated(0.0, "not yet"),
                       steps_per_inference=estimated(1.0, "not yet"))


def _window_budget(machine: MachineProbe, unmeasured: PolicyProbe, shape: RunShape, budget: float, env_share: float,
                   wall_share: float | None, started: float) -> Callable[[EnvProbe, float], float]:
    """The env probe's window budget: (the warm-up's figures, seconds spent) -> the seconds the
    windows may take, the env's share of `budget` less what was spent, and with `wall_share`,
    at most that share of the wall the warm-up predicts (less what was spent since `started`)."""
    with_policy = unmeasured.placement == "worker"

    def window_budget(warm: EnvProbe, spent: float) -> float:
        left = budget * env_share - spent
        if wall_share is None:
            return left
        # the warm-up's figures predict the run; the windows get their share of it
        wall = recommend(Probe(machine=machine, env=warm, policy=unmeasured, run=shape)).predicted_wall_s
        # a policy in the driver is timed after the env, out of the same share
        of_share = 1.0 if with_policy else env_share
        allowed = min(left, wall_share * wall * of_share - (time.monotonic() - started))
        log.debug("tune: the warm-up predicts a wall of %.1f s; %.1f s spent so far", wall, time.monotonic() - started)
        return allowed

    return window_budget


def _driver_setup(cfg: RunConfig) -> Any:
    """What the continuous scheduler does before its workers start: one env per task for
    the observation layout (timed on up to 5 tasks, scaled to all)."""
    tasks = [t for names in cfg.env.tasks().values() for t in names]
    t0 = time.perf_counter()
    for task in tasks[:5]:
        env = cfg.env.make_task_env(task)
        obs_layout(env.observation_space)
        env.close()
    took = (time.perf_counter() - t0) * len(tasks) / min(5, len(tasks))
    if len(tasks) <= 5:
        return measured(took, f"observation layout of {len(tasks)} tasks")
    return estimated(took, f"5 of {len(tasks)} tasks timed, scaled")


# -- output ------------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def report(probe: Probe, rec: Recommendation, stored: Path | None = None) -> str:
    """The probe's figures and the recommendation, as `rollbench tune` prints them."""
    use = ProbeUse("measured", probe.took_s, str(stored) if stored else "", budget_s=probe.budget_s)
    lines = [f"probe: {use.line(rec)}", "", f"machine ({probe.host}, probed in {probe.took_s:.1f}s):"]
    lines += _machine_lines(probe.machine)
    lines += _env_lines(probe.env, probe.policy.placement)
    lines += _policy_lines(probe.policy, probe.env)
    lines.append("")
    lines += _recommendation_lines(rec)
    return "\n".join(lines)


def _machine_lines(m: MachineProbe) -> list[str]:
    """The report's lines on the machine: cores, memory, GPUs."""
    lines = [f"  cores               {m.cores.show(fmt='{:.0f}')}"]
    lines.append(f"  memory available    {m.mem_available_bytes.show(fmt='{:.3g}', unit='')} bytes"
                 f" ({m.mem_available_bytes.v / 2**30:.1f} GiB)")
    if m.gpus:
        for g in m.gpus:
            lines.append(f"  gpu {g.index}               {g.name}: {g.free_mib} of {g.total_mib} MiB free [measured]")
    else:
        lines.append("  gpus                none [measured: nvidia-smi finds none]")
    return lines


def _env_lines(e: EnvProbe, placement: str) -> list[str]:
    """The report's lines on the env, the worker loop's when the policy runs in the workers."""
    lines = [f"env (MUJOCO_GL={e.backend}):"]
    lines.append(f"  worker start        {e.worker_start_s.show(' s')}")
    lines.append(f"  first env build     {e.first_build_s.show(' s')}")
    lines.append(f"  env build           {e.build_s.show(' s')}")
    lines.append(f"  reset               {e.reset_ms.show(' ms')}")
    lines.append(f"  step, one process   {e.step_ms_1.show(' ms')}")
    lines.append(f"  {f'step, {e.parallel} at once':20s}{e.step_ms_all.show(' ms')}")
    if e.loop_ms_1 is not None and e.loop_ms_all is not None and placement == "worker":
        lines.append(f"  worker loop, alone  {e.loop_ms_1.show(' ms')}")
        lines.append(f"  {f'worker loop, {e.parallel} at once':20s}{e.loop_ms_all.show(' ms')}")
    lines.append(f"  video frame         {e.render_ms.show(' ms')}")
    if e.other_backend and e.other_render_ms is not None:
        lines.append(f"  video frame ({e.other_backend}) {e.other_render_ms.show(' ms')}")
    lines.append(f"  episode length      {e.episode_steps.show(' steps', '{:.1f}')}")
    lines.append(f"  worker memory       {_mib(e.worker_rss_bytes.v)} [{e.worker_rss_bytes.source}]")
    lines.append(f"  round trip          {e.roundtrip_ms.show(' ms')}")
    lines.append(f"  driver set-up       {e.driver_setup_s.show(' s')}")
    return lines


def _policy_lines(pol: PolicyProbe, e: EnvProbe) -> list[str]:
    """The report's lines on the policy: load, weights, memory, and its time per call at each
    batch measured (per step in a worker, from the env probe, when it runs there)."""
    lines = [f"policy ({pol.type} on {pol.device}, {pol.placement} placement, {pol.threads} torch threads):"]
    lines.append(f"  load                {pol.load_s.show(' s')}")
    lines.append(f"  weights             {_mib(pol.param_bytes.v)} [{pol.param_bytes.source}: {pol.param_bytes.note}]")
    lines.append(f"  memory              {_mib(pol.rss_bytes.v)} [{pol.rss_bytes.source}: {pol.rss_bytes.note}]")
    lines.append(f"  steps per call      {pol.steps_per_inference.show(fmt='{:.0f}')}")
    if pol.placement == "worker":
        lines.append(f"  per step in worker  {e.policy_ms_worker.show(' ms')}")
    for pt in pol.inference:
        peak = f", +{_mib(pt.peak_bytes)} activations" if pt.peak_bytes else ""
        lines.append(f"  batch {pt.batch:<4}          {pt.full_ms:.3g} ms per call ({pt.full_ms / pt.batch:.3g} ms/row), "
                     f"{pt.queued_ms:.3g} ms from the queue, {pt.cpu_util:.2g} cores busy{peak} [measured]")
    for pt in pol.inference_1t:
        lines.append(f"  batch {pt.batch:<4} 1 thread {pt.full_ms:.3g} ms per call ({pt.full_ms / pt.batch:.3g} ms/row) [measured]")
    for pt in pol.amp_inference:
        lines.append(f"  batch {pt.batch:<4} AMP      {pt.full_ms:.3g} ms per call [measured]")
    return lines


def _recommendation_lines(rec: Recommendation) -> list[str]:
    """The report's lines on the recommendation: the bottleneck, the reasons, the prediction."""
    lines = ["recommendation:", f"  {rec.bottleneck}"]
    for r in rec.reasons:
        lines.append(f"  - {r}")
    lines.append(f"  predicted: {rec.predicted_steps_per_s:.4g} env-steps/s as eval_info.json reports it (steps / eval_s, "
                 f"the first episode's start to the last one's end; {rec.steady_steps_per_s:.4g} while every slot is busy), "
                 f"{rec.predicted_total_steps:.0f} steps, eval_s {rec.predicted_eval_s:.1f}s, "
                 f"wall {rec.predicted_wall_s:.1f}s with start-up")
    if rec.use_amp:
        lines.append("  AMP is recommended but not applied by --workers=auto: it changes the policy's numbers")
    return lines


def recommended_flags(rec: Recommendation) -> list[str]:
    """The recommendation as `rollbench eval` flags (every one of them in `codec.TUNED_FLAGS`)."""
    out: dict[str, Any] = {}
    if rec.mode == "continuous":
        out.update({"workers": rec.workers, "slots_per_worker": rec.slots_per_worker,
                    "policy.max_batch_size": rec.max_rows_per_call})
    else:
        # the batch's envs step in --workers env workers (in parallel when more than one)
        out.update({"eval.mode": "lockstep", "eval.batch_size": rec.envs_per_batch, "workers": rec.workers})
    out["render_device"] = rec.render_device
    if rec.use_amp:
        out["policy.use_amp"] = True
    if rec.num_shards > 1:
        out.update({"executor": "shards", "eval.num_shards": rec.num_shards})
    return to_argv(to_flags(out))


def eval_command(flags: dict[str, str], rec: Recommendation) -> str:
    """The user's flags with the recommended settings in place of the scheduling ones."""
    keep = to_argv(without(flags, (*TUNED_FLAGS, "policy.use_amp")))
    if "policy.use_amp" in flags and not rec.use_amp:
        keep.append(f"--policy.use_amp={flags['policy.use_amp']}")
    return shlex.join(["rollbench", "eval", *keep, *recommended_flags(rec)])


def save(path: Path, probe: Probe, rec: Recommendation, command: str, cfg: RunConfig) -> Path | None:
    """Write the probe and the recommendation to `path`, and store the probe for later
    `--workers=auto` runs (cache.py); returns where it was stored (None: not stored)."""
    from rollbench.results.store import write_json_atomic  # lazy: keeps probe processes light

    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "schema": SCHEMA,
        "probe": probe.to_dict(),
        "recommendation": dataclasses.asdict(rec),
        "predicted_steps_per_s": rec.predicted_steps_per_s,
        "predicted_wall_s": rec.predicted_wall_s,
        "predicted_eval_s": rec.predicted_eval_s,
        "predicts": PREDICTS,
        "command": command,
    }
    write_json_atomic(path, data)
    return _store(cfg, probe)


def _store(cfg: RunConfig, probe: Probe) -> Path | None:
    from rollbench.tune import cache  # lazy: keeps probe processes light

    if probe.env.windows <= 0:
        return None  # the warm-up's figures only: not worth reusing
    return cache.store(cfg, probe)


def load(path: str) -> Probe:
    try:
        data = json.loads(Path(path).read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, this rollbench reads {SCHEMA}")
        return Probe.from_dict(data["probe"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"--tune.load={path}: not a `rollbench tune` JSON this version can read ({err})") from None


#: what `predicted_steps_per_s` predicts, in eval_info.json's terms
PREDICTS = "env-steps / overall.eval_s (the first episode's start to the last episode's end; start-up excluded)"


@dataclasses.dataclass(frozen=True)
class ProbeUse:
    """What `--workers=auto` or `rollbench tune` did to know the machine, for its one line."""

    how: str  # measured | reused | loaded | skipped
    seconds: float  # spent on it (looking up, reading or measuring)
    path: str = ""  # the stored probe (reused, or stored after measuring), or --tune.load
    why: str = ""  # skipped: why; measured: why no stored probe was used
    budget_s: float = 0.0

    def line(self, rec: Recommendation | None) -> str:
        from rollbench.tune.cache import shown  # lazy: keeps probe processes light

        wall = rec.predicted_wall_s if rec is not None else 0.0
        share = f" ({self.seconds / wall:.0%} of the predicted {wall:.1f} s)" if wall > 0 else ""
        if self.how == "reused":
            return f"probe reused from {shown(Path(self.path))}{share}; --tune.reprobe=true measures again"
        if self.how == "loaded":
            return f"probe loaded from {self.path}"
        if self.how == "skipped":
            return f"no probe: {self.why}"
        stored = f"; stored in {shown(Path(self.path))}" if self.path else ""
        return f"probed in {self.seconds:.1f} s{share}, within a budget of {self.budget_s:.1f} s{stored}"

    def to_dict(self, rec: Recommendation | None) -> dict[str, Any]:
        wall = rec.predicted_wall_s if rec is not None else 0.0
        return {"how": self.how, "seconds": self.seconds, "share_of_predicted_wall": self.seconds / wall if wall > 0 else None,
                "budget_s": self.budget_s, "path": self.path, "why": self.why}


def prediction(rec: Recommendation | None, use: ProbeUse) -> dict[str, Any]:
    """What `--workers=auto` records in eval_info.json (`tune`): the flags it applied, the
    model's prediction (to check against what the run achieved: its steps over
    `overall.eval_s`), and how the machine was known."""
    if rec is None:
        return {"probe": use.to_dict(rec), "flags": []}
    return {
        "probe": use.to_dict(rec),
        "flags": recommended_flags(rec), "bottleneck": rec.bottleneck,
        "predicted_steps_per_s": rec.predicted_steps_per_s, "predicts": PREDICTS,
        "predicted_eval_s": rec.predicted_eval_s, "predicted_wall_s": rec.predicted_wall_s,
        "predicted_total_steps": rec.predicted_total_steps,
    }


def fits(probe: Probe, cfg: RunConfig) -> bool:
    """A saved probe describes this machine and this kind of run."""
    return probe.host == socket.gethostname() and int(probe.machine.cores.v) == cpu_count() and \
        probe.policy.type == cfg.policy.type and probe.policy.device == cfg.policy.device


def _this_run(cfg: RunConfig, probe: Probe) -> Probe:
    """A probe measured for another run of the same kind, applied to this run's amount of work."""
    n = len(shard(plan_for(cfg), cfg.eval.shard_id, cfg.eval.num_shards))
    return dataclasses.replace(probe, run=run_shape(cfg, n))


def for_eval(cfg: RunConfig, policy: Policy, load_s: float, rss_before: int) -> tuple[Probe | None, Recommendation | None, ProbeUse]:
    """`--workers=auto`: load, reuse or measure a probe (or none, for a run too short to pay
    for one), and recommend; `scheduler.decide` takes the recommendation (the config is
    never rewritten). Logs one line that says which."""
    t0 = time.monotonic()
    probe: Probe | None = None
    if cfg.tune.load:
        probe = load(cfg.tune.load)
        if not fits(probe, cfg):
            log.warning("--tune.load=%s was measured on %s (%d cores, %s policy on %s); using it anyway",
                        cfg.tune.load, probe.host, int(probe.machine.cores.v), probe.policy.type, probe.policy.device)
        probe = _this_run(cfg, probe)  # the saved probe's env and policy costs, this run's amount of work
        use = ProbeUse("loaded", time.monotonic() - t0, cfg.tune.load)
    else:
        probe, use = _reuse_or_measure(cfg, policy, load_s, rss_before, t0)
    if probe is None:
        log.info("--workers=auto: %s", use.line(None))
        return None, None, use
    rec = recommend(probe)
    log.info("--workers=auto: %s", use.line(rec))
    log.info("--workers=auto: %s", " ".join(recommended_flags(rec)))
    log.info("--workers=auto: %s", rec.bottleneck)
    return probe, rec, use


def _reuse_or_measure(cfg: RunConfig, policy: Policy, load_s: float, rss_before: int,
                      t0: float) -> tuple[Probe | None, ProbeUse]:
    """A stored probe of this machine and kind of run (unless --tune.reprobe), else one measured
    now within the budget the run pays for, or none for a run too short to pay for one; and
    what was done, its seconds counted from `t0`."""
    from rollbench.tune import budget as b  # lazy: keeps probe processes light
    from rollbench.tune import cache  # lazy: keeps probe processes light
    from rollbench.tune.probe import probe_machine  # lazy: keeps probe processes light

    machine = probe_machine()
    found = None if cfg.tune.reprobe else cache.lookup(cfg, machine.gpus)
    if found is not None and found.probe is not None:
        probe = dataclasses.replace(_this_run(cfg, found.probe), machine=machine)
        return probe, ProbeUse("reused", time.monotonic() - t0, str(found.path), f"measured {found.age()} ago")
    why = "--tune.reprobe=true" if found is None else found.why
    units = shard(plan_for(cfg), cfg.eval.shard_id, cfg.eval.num_shards)
    budget = b.probe_budget(cfg, units, int(machine.cores.v))
    if budget <= 0 and cfg.tune.reprobe:
        budget = min(cfg.tune.budget_s, b.MIN_PROBE_S)
    if budget <= 0:
        est = b.first_estimate_s(cfg, units, int(machine.cores.v))
        return None, ProbeUse("skipped", time.monotonic() - t0, why=(
            f"this run takes at most ~{est:.0f} s (every episode to its step limit, unmeasured), and a probe "
            f"costs at least {b.MIN_PROBE_S:.0f} s, more than {b.PROBE_SHARE:.0%} of it; running with the "
            f"scheduler's defaults ({why}; `rollbench tune` stores a probe that later runs reuse)"))
    log.info("--workers=auto: measuring this machine (%s; up to %.1f s)", why, budget)
    probe = measure(cfg, policy, load_s, rss_before, budget_s=budget, wall_share=b.PROBE_SHARE)
    stored = _store(cfg, probe)
    return probe, ProbeUse("measured", time.monotonic() - t0, str(stored) if stored else "", why, budget)


def default_tune_path(cfg: RunConfig) -> Path:
    """`--tune.output`, else outputs/tune/<date>/<time>_<env>_<policy>.json."""
    if cfg.tune.output:
        return Path(cfg.tune.output)
    now = dt.datetime.now()
    return Path("outputs", "tune", now.strftime("%Y-%m-%d"), f"{now.strftime('%H-%M-%S')}_{cfg.env.type_name}_{cfg.policy.type}.json")
