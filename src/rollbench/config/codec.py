"""One codec between a run's config, as run.json and eval_info.json hold it
(`RunConfig.to_dict()`), and the flags that set it.

    config dict ──to_flags──▶ {"env.type": "metaworld", "eval.n_episodes": "50", ...}
                                   │ (a `type` first: it picks the class the other flags fill)
                                   ├──▶ cli.config_from_flags ──▶ RunConfig again
                                   └──to_argv──▶ ["--env.type=metaworld", ...] (a command to show or rerun)

Used to rebuild a RunConfig (`cli.config_from_dict`), the command a report shows when a run
recorded none (`report.runs.command_line`), and the command `rollbench merge` writes for the
run whose shards it merged (`cli.rerun_argv`). The shard launcher's children and `rollbench
tune`'s suggested command spell the user's own flags through `to_argv` too: they keep the
flags as the user typed them (a relative path stays relative), less those they set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The flags that someone other than the user sets, in one place (each list replaces the user's
#: values of its flags where it applies):
#: a shard's own, not the run's: a command that reruns the whole run drops them (`rollbench merge`)
SHARD_FLAGS = ("eval.shard_id", "eval.num_shards", "launch", "resume")
#: what a `--launch=local` launcher sets for each child: which shard, that it launches nothing,
#: where it writes, that it resumes (the launcher applied --resume=false once, for all of them)
CHILD_FLAGS = ("eval.shard_id", "launch", "output_dir", "resume")
#: what `rollbench tune` recommends (the scheduling settings, and the tune flags that asked for
#: them): its suggested command, and a launcher's `--workers=auto` children, get its values
TUNED_FLAGS = ("workers", "slots_per_worker", "eval.batch_size", "policy.max_batch_size", "eval.use_async_envs",
               "eval.mode", "policy.placement", "render_device", "eval.num_shards", "launch", "tune.budget_s",
               "tune.output", "tune.load", "tune.reprobe")


def without(flags: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """`flags` less those of `names` (one of the lists above)."""
    return {k: v for k, v in flags.items() if k not in names}


def to_flags(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flag name (without `--`) -> value: nested sections become dotted names, a benchmark's
    or policy's `options` its own flags, booleans `true`/`false`, lists comma-joined; None
    (unset) is left out."""
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
