"""One codec between the flags that set a run and its config, both ways.

    flags {"env.type": "metaworld", "eval.n_episodes": "50", ...}   (the CLI's argv parsed, bench/, tests)
        ──config_from_flags──▶ RunConfig: `--env.type` picks the benchmark class its other flags
                               fill, `--policy.type` the policy type whose own flags are checked
    RunConfig.to_dict() (run.json, eval_info.json's `config`)
        ──to_flags──▶ flags again (a `type` first) ──to_argv──▶ ["--env.type=metaworld", ...]

Config → flags → config is the identity. Used by the CLI's commands, `rollbench serve` (its
`--env.*` and `--policy.*` groups), a merge (`config_from_dict`, and `rerun_argv`, the command
it writes for the run whose shards it merged), the command a report shows when a run recorded
none (`report.runs.command_line`). The shard launcher's children and `rollbench tune`'s
suggested command spell the user's own flags through `to_argv` too: they keep the flags as the
user typed them (a relative path stays relative), less those they set.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
from collections.abc import Mapping
from typing import Any

from rollbench import perturb
from rollbench.config.env import BENCHMARKS, BenchmarkConfig
from rollbench.config.eval import EvalConfig
from rollbench.config.fields import build
from rollbench.config.policy import POLICIES, PolicyConfig
from rollbench.config.ray import RayConfig
from rollbench.config.run import RunConfig
from rollbench.config.tune import TuneConfig
from rollbench.errors import ConfigError, RollbenchError, UnknownNameError, did_you_mean

log = logging.getLogger(__name__)

#: The flags that someone other than the user sets, in one place (each list replaces the user's
#: values of its flags where it applies):
#: a shard's own, not the run's: a command that reruns the whole run drops them (`rollbench merge`;
#: `launch` is in run.json files written before --executor=shards, and `--executor=shards` too is
#: dropped there, `rerun_argv`)
SHARD_FLAGS = ("eval.shard_id", "eval.num_shards", "launch", "resume")
#: what an `--executor=shards` launcher sets for each child: which shard, that it runs it in
#: this process (`--executor=local`), where it writes, that it resumes (the launcher applied
#: --resume=false once, for all of them)
CHILD_FLAGS = ("eval.shard_id", "executor", "launch", "output_dir", "resume")
#: what `rollbench tune` recommends (the scheduling settings, and the tune flags that asked for
#: them): its suggested command gets its values. (A launcher's `--workers=auto` children get its
#: one recommendation as a `decide.Override` file, not as flags.)
TUNED_FLAGS = ("workers", "slots_per_worker", "eval.batch_size", "policy.max_batch_size", "eval.use_async_envs",
               "eval.mode", "policy.placement", "render_device", "eval.num_shards", "executor", "launch",
               "tune.budget_s", "tune.output", "tune.load", "tune.reprobe")
#: `--launch`, before it was an executor: the values it took, and the executor each one is now
LAUNCH_VALUES = {"none": None, "local": "shards"}


def config_from_flags(flags: Mapping[str, str]) -> RunConfig:
    """Flag name (without `--`) -> value, as `rollbench eval` takes them, into the run's config;
    a flag no group takes, or a bad value, is a one-line ConfigError naming it."""
    flags = dict(flags)
    read_launch(flags, warn=True)
    if "eval.sweep" in flags:  # the file's conditions join --eval.perturb's, as a spec: no process reads it again
        spec = perturb.sweep_file(flags.pop("eval.sweep"))
        flags["eval.perturb"] = ";".join(filter(None, (flags.get("eval.perturb", ""), spec)))
    if flags.get("eval.paraphrases"):  # read once, too: the run records the table
        flags["eval.paraphrases"] = perturb.read_paraphrases(flags["eval.paraphrases"])
    if "rename_map" in flags:  # lerobot-eval's top-level flag; it shapes what the policy sees
        if "policy.rename_map" in flags:
            raise ConfigError("--rename_map and --policy.rename_map are the same flag; give one")
        flags["policy.rename_map"] = flags.pop("rename_map")
    env = benchmark_from_flags(group(flags, "env."))
    policy = policy_from_flags(group(flags, "policy."))
    eval_cfg = build(EvalConfig, group(flags, "eval."), "eval.")
    tune_cfg = build(TuneConfig, group(flags, "tune."), "tune.")
    ray_cfg = build(RayConfig, group(flags, "ray."), "ray.")
    executor_options = group(flags, "executor.")  # the executor checks them (Executor.options)
    for key in list(flags):
        if "." in key:
            raise ConfigError(f"unknown flag --{key}; flag groups are --env.*, --policy.*, --eval.*, --tune.*, --ray.*, "
                              f"--executor.*")
    if not flags.get("output_dir"):
        flags["output_dir"] = default_output_dir(env.type_name, policy.type, flags.get("job_name"))
    return build(RunConfig, flags, "", env=env, policy=policy, eval=eval_cfg, tune=tune_cfg, ray=ray_cfg,
                 executor_options=executor_options)


def config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """Rebuild a RunConfig from the `config` section of run.json / eval_info.json (one written
    before --executor=shards holds `launch`: read as that executor, without a warning)."""
    flags = to_flags(data)
    read_launch(flags, warn=False)
    return config_from_flags(flags)


def read_launch(flags: dict[str, str], warn: bool) -> None:
    """`--launch`, the old spelling of `--executor=shards`, taken out of `flags`: `local` is
    that executor (`warn`: with one warning line), `none` (the default) nothing; any other
    value, or `local` beside another executor, is a one-line ConfigError."""
    if "launch" not in flags:
        return
    value = flags.pop("launch")
    if value not in LAUNCH_VALUES:
        raise ConfigError(f"--launch={value} is not allowed; it takes {' or '.join(LAUNCH_VALUES)} "
                          f"(--launch=local is now --executor=shards)")
    executor = LAUNCH_VALUES[value]
    if executor is None:
        return
    given = flags.get("executor", "local")
    if given not in ("local", executor):
        raise ConfigError(f"--executor={given} with --launch={value} is not allowed: --launch={value} is now "
                          f"--executor={executor}, and a run has one executor; give one of the two")
    if warn:
        log.warning("--launch=%s is now --executor=%s; the old spelling still works", value, executor)
    flags["executor"] = executor


def default_output_dir(env_type: str, policy_type: str, job_name: str | None = None) -> str:
    """lerobot-eval's layout: outputs/eval/<date>/<time>_<job name> (default <env>_<policy>)."""
    now = dt.datetime.now()
    name = job_name or f"{env_type}_{policy_type}"
    return os.path.join("outputs", "eval", now.strftime("%Y-%m-%d"), f"{now.strftime('%H-%M-%S')}_{name}")


def group(flags: dict[str, str], prefix: str) -> dict[str, str]:
    """Take the flags under `prefix` out of `flags`, the prefix stripped."""
    return {k[len(prefix) :]: flags.pop(k) for k in list(flags) if k.startswith(prefix)}


def benchmark_from_flags(env_flags: dict[str, str]) -> BenchmarkConfig:
    env_type = env_flags.pop("type", None)
    if not env_type:
        raise ConfigError(f"--env.type is required; known benchmarks: {', '.join(BENCHMARKS.names())}")
    try:
        cls = BENCHMARKS.get(env_type)
    except ConfigError as err:
        raise ConfigError(f"--env.type={env_type!r}: {err}") from None
    return build(cls, env_flags, "env.")


def policy_from_flags(policy_flags: dict[str, str]) -> PolicyConfig:
    known = {f.name for f in dataclasses.fields(PolicyConfig)} - {"options"}
    options = {k: v for k, v in policy_flags.items() if k not in known}
    base = {k: v for k, v in policy_flags.items() if k in known}
    if not base.get("type") and base.get("path"):
        # lerobot-eval's command line: --policy.path names a checkpoint and implies its kind
        if ":" in base["path"] and not os.path.isdir(base["path"]):
            raise ConfigError(
                f"--policy.path={base['path']} looks like a module policy (pkg.mod:factory); "
                f"add --policy.type=module (a LeRobot checkpoint directory needs no --policy.type)"
            )
        base["type"] = "lerobot"
    ptype = base.get("type", "")
    if ptype:
        try:
            factory = POLICIES.get(ptype)
        except UnknownNameError:  # a LeRobot (or LeRobot plugin's) type means the LeRobot adapter, which checks it
            factory = POLICIES.get("lerobot")
            base["type"], base["lerobot_type"] = "lerobot", factory.type_of(ptype, base.get("path"))
            ptype = "lerobot"
        except ConfigError as err:
            raise ConfigError(f"--policy.type={ptype!r}: {err}") from None
        options = _own_options(ptype, factory, options, known)
    return build(PolicyConfig, base, "policy.", options=options)


def _own_options(ptype: str, factory: Any, options: dict[str, str], known: set[str]) -> dict[str, str]:
    """A policy type's own `--policy.*` flags, each checked and spelled as its type spells it;
    one the type does not take is a one-line error with a did-you-mean."""
    own = getattr(factory, "options_class", None)  # a type's own flags, a dataclass
    takes = [f.name for f in dataclasses.fields(own)] if own is not None else []
    clash = sorted(set(takes) & known)
    if clash and own is not None:  # `--policy.<name>` would set PolicyConfig's field, never the type's own
        raise ConfigError(
            f"--policy.type={ptype}: its options ({own.__name__}) declare {', '.join(clash)}, a flag every "
            f"policy type takes (--policy.{clash[0]}); the plugin must give its own flag another name"
        )
    if own is not None or not getattr(factory, "accepts_options", False):
        for key in options:
            if key not in takes:
                hint = did_you_mean(key, sorted(known | set(takes)), "--policy.{}".format)
                its = f" Known: {', '.join('--policy.' + n for n in takes)}." if takes else ""
                raise ConfigError(f"unknown flag --policy.{key} for --policy.type={ptype}.{hint}{its} "
                                  f"See `rollbench eval --help`.")
    if own is None or not options:
        return options
    # each value checked now and spelled as its type spells it, so that `--policy.chunk_size=03`
    # is the run `=3` is (a run's identity compares the options), and a bad value is refused here
    typed = to_flags(dataclasses.asdict(build(own, options, "policy.")))
    return {key: typed.get(key, value) for key, value in options.items()}


def to_flags(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flag name (without `--`) -> value: nested sections become dotted names, a benchmark's
    or policy's `options` its own flags, booleans `true`/`false`, lists comma-joined; None
    (unset) is left out. A `type` comes first: it picks the class the other flags fill."""
    out: dict[str, str] = {}
    for key in sorted(data, key=lambda k: k != "type"):  # stable: the rest keep their order
        value = data[key]
        if value is None:
            continue
        if isinstance(value, Mapping):
            nested = {"options": prefix, "executor_options": f"{prefix}executor."}.get(key, f"{prefix}{key}.")
            out.update(to_flags(value, nested))
        elif isinstance(value, list | tuple):
            out[f"{prefix}{key}"] = ",".join(map(str, value))
        else:
            out[f"{prefix}{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def to_argv(flags: Mapping[str, str]) -> list[str]:
    return [f"--{name}={value}" for name, value in flags.items()]


def without(flags: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """`flags` less those of `names` (one of the lists above)."""
    return {k: v for k, v in flags.items() if k not in names}


def rerun_argv(data: Mapping[str, Any]) -> list[str]:
    """`rollbench eval` with the flags of the run whose config is `data` (a merge's: its
    shards' run, as one process; every episode is a function of its unit, so it gives the
    same results), keeping only what differs from the defaults of its benchmark and policy."""
    full = without(to_flags(data), SHARD_FLAGS)
    if full.get("executor") == "shards":  # the launcher of the shards: the run as one process is the local executor's
        del full["executor"]
    try:
        base: dict[str, str] = {k: full[k] for k in ("env.type", "policy.type", "policy.path", "output_dir") if k in full}
        defaults = to_flags(config_from_flags(base).to_dict())
    except RollbenchError:  # a policy that needs more flags to build: every flag, then
        defaults = {}
    kept = {k: v for k, v in full.items() if k.endswith(".type") or k == "output_dir" or defaults.get(k) != v}
    return ["rollbench", "eval", *to_argv(kept)]
