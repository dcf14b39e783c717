"""The `rollbench` command: eval, tune, merge, report, compare, serve, list.

Flags are `--group.field=value` (or `--group.field value`), as in `lerobot-eval`;
`--env.type` picks the benchmark whose fields the other `--env.*` flags set. Errors print
as one line without a traceback (`--debug` shows it). Exit codes: 0 done, 1 the run
failed (or a merged result is partial), 2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollbench import quiet, writable
from rollbench.config.codec import config_from_dict, config_from_flags, rerun_argv
from rollbench.config.env import BENCHMARKS
from rollbench.config.eval import EvalConfig
from rollbench.config.fields import field_help
from rollbench.config.policy import POLICIES, PolicyConfig
from rollbench.config.ray import RayConfig
from rollbench.config.run import RunConfig
from rollbench.config.tune import TuneConfig
from rollbench.errors import ConfigError, RollbenchError, UnknownNameError, did_you_mean, message_line
from rollbench.executors import EXECUTORS
from rollbench.registry import load_plugins
from rollbench.version import __version__

if TYPE_CHECKING:
    from rollbench.executors.base import Executor

log = logging.getLogger("rollbench")

COMMANDS = {
    "eval": "evaluate a policy on a benchmark",
    "tune": "measure this machine for an evaluation; recommend workers, slots, batch, render device, AMP",
    "merge": "rebuild eval_info.json from every episode log under a directory",
    "report": "write DIR/report.html: summary, per-task success with intervals, lengths, throughput, videos",
    "compare": "is run B better than run A? per-task and overall differences with exact tests and a verdict",
    "serve": "serve a policy over a websocket to rollbench, openpi and vla-eval clients, batched across clients",
    "check": "before a run: does a LeRobot checkpoint fit the benchmark? a table of inputs, stats, action, fixes",
    "list": "show the registered benchmarks (groups, tasks) and policy types; `list BENCHMARK`: all its tasks",
}


#: flags that may be given several times: their values are joined with ";"
REPEATABLE = ("eval.perturb",)


def parse_flags(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """`--a.b=c`, `--a.b c` and bare `--flag` (true) -> ({"a.b": "c"}, positionals)."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--") and len(token) > 2:
            key, eq, value = token[2:].partition("=")
            if not eq:
                if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    value = argv[i + 1]
                    i += 1
                else:
                    value = "true"
            if key in flags and key in REPEATABLE:
                value = f"{flags[key]};{value}"
            elif key in flags:
                raise ConfigError(f"--{key} is given twice ({flags[key]!r} and {value!r})")
            flags[key] = value
        else:
            positional.append(token)
        i += 1
    return flags, positional


#: --eval.sweep is read with the flags (config.codec): it becomes --eval.perturb's spec, which the run records
SWEEP_HELP = ("--eval.sweep", "path, default none",
              "a robustness sweep file (JSON, or TOML): 'axes' (one at a time, as --eval.perturb), 'grid' (every "
              "combination of the levels) and 'conditions' (axes at once); joined to --eval.perturb's conditions "
              "(docs/robustness.md)")


def resolved(cfg: RunConfig) -> RunConfig:
    """The run's config with a hub checkpoint or EnvHub repository resolved to its commit
    (downloaded once, here)."""
    from rollbench.policies.checkpoint import resolve_policy  # lazy: not on the path of --help and list

    policy, env = resolve_policy(cfg.policy), cfg.env.resolve()
    return cfg if policy is cfg.policy and env is cfg.env else dataclasses.replace(cfg, policy=policy, env=env)


# -- help ---------------------------------------------------------------------------


def _rows(rows: list[tuple[str, str, str]]) -> str:
    out = []
    for flag, kind, text in rows:
        out.append(f"  {flag}  ({kind})")
        out.extend(textwrap.wrap(text, width=88, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False))
    return "\n".join(out)


def _types_help(registry: Any, group: str, fields_of: Any) -> list[str]:
    """`--group.type=NAME: its first doc line` and the flags of its fields, for every type in
    `registry` whose `fields_of(type)` is a dataclass (a broken plugin: one line saying so)."""
    parts: list[str] = []
    for name in registry.names():
        try:
            factory = registry.get(name)
        except Exception as err:  # a broken third-party plugin must not break --help
            parts.append(f"\n  --{group}.type={name}: cannot load ({err})")
            continue
        fields = fields_of(factory)
        doc = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
        if fields is not None:
            parts += ["", f"  --{group}.type={name}: {doc}", _rows(field_help(fields, f"{group}."))]
        elif getattr(factory, "accepts_options", False):  # flags it checks itself (LeRobot: its config's fields)
            parts += ["", f"  --{group}.type={name}: {doc}", _rows([(
                f"--{group}.<field>", "the field's type", getattr(factory, "options_help", "") or "flags this type reads and checks itself")])]
    return parts


def eval_help() -> str:
    parts = [
        "usage: rollbench eval --env.type=NAME [--env.FIELD=VALUE ...] --policy.type=TYPE [flags]",
        "",
        "Evaluate a policy on a benchmark. Results go to --output_dir: episodes/*.jsonl (one",
        "durable line per finished episode), eval_info.json and run.json. Rerunning the same",
        "command with the same --output_dir resumes.",
        "",
        "run:",
        _rows([r for r in field_help(RunConfig, "") if r[0] not in ("--env", "--policy", "--eval", "--tune", "--ray",
                                                                    "--executor_options")]),
        "  --executor.FIELD  (a plugin executor's own flags: its options_class; docs/adding_an_executor.md)",
        "",
        "eval:",
        _rows([*field_help(EvalConfig, "eval."), SWEEP_HELP]),
        "",
        "tune (rollbench tune, and eval --workers=auto):",
        _rows(field_help(TuneConfig, "tune.")),
        "",
        "ray (--executor=ray):",
        _rows(field_help(RayConfig, "ray.")),
        "",
        "policy:",
        _rows([r for r in field_help(PolicyConfig, "policy.") if r[0] != "--policy.options"]),
        "  --policy.type  (" + "|".join(POLICIES.names()) + ")",
        "      which policy adapter to use",
        # a policy type's own flags: those it declares (`options_class`)
        *_types_help(POLICIES, "policy", lambda factory: getattr(factory, "options_class", None)),
        "",
        "env (--env.type picks the benchmark; each takes its own fields):",
        "  --env.type  (" + "|".join(BENCHMARKS.names()) + ")",
        *_types_help(BENCHMARKS, "env", lambda cls: cls),
    ]
    return "\n".join(parts)


MERGE_HELP = """usage: rollbench merge DIR

Rebuild DIR/eval_info.json from every episode log under DIR (DIR/episodes/*.jsonl and any
*/episodes/*.jsonl below it, e.g. shards written on several machines). Aggregates are
recomputed from the episodes; a unit logged twice counts once (conflicting duplicates are
reported); missing units are listed and the result is marked partial (exit code 1)."""

TUNE_HELP_HEAD = """usage: rollbench tune --env.type=NAME [--env.FIELD=VALUE ...] --policy.type=TYPE [eval flags] [--tune.*]

Measure this machine for the evaluation these flags describe (within --tune.budget_s): CPU
cores, free memory, GPUs; the policy's weights, memory, load time and time per call at
batch sizes 1, 2, 4, ...; the env's worker start-up, build, reset, step (one process, and
one per core at once) and video-frame times; the episode lengths of a policy that runs in
the workers. Every figure is marked measured or estimated (with why). Then recommend
--workers, --slots_per_worker, the batch bound, --render_device, AMP and local shards, say
what bounds the run, predict its throughput and wall time, print a paste-ready
`rollbench eval` command and write everything as JSON (--tune.output). Nothing is
evaluated and no output directory is written. `rollbench eval --workers=auto` does the same
and uses the recommendation.

The flags are those of `rollbench eval` (see `rollbench eval --help`)."""


def tune_help() -> str:
    return "\n".join([TUNE_HELP_HEAD, "", "tune:", _rows(field_help(TuneConfig, "tune."))])


LIST_HELP = """usage: rollbench list [BENCHMARK]

Without BENCHMARK: every registered benchmark (--env.type) with its groups of tasks (the
count and the first few names of each), then the policy types (--policy.type).
With BENCHMARK (e.g. `rollbench list libero`): each group of that benchmark and all its
task names, one a line."""


def main_help() -> str:
    lines = [f"rollbench {__version__}: evaluate robot-learning policies in simulation", "", "usage: rollbench COMMAND [flags]", ""]
    lines += [f"  {name:<7} {text}" for name, text in COMMANDS.items()]
    lines += ["", "`rollbench COMMAND --help` documents every flag of COMMAND.", "", "exit codes: 0 done, 1 run failed, 2 bad usage or config, 130 interrupted"]
    return "\n".join(lines)


# -- commands -----------------------------------------------------------------------


CHECK_HELP = """usage: rollbench check <the flags of rollbench eval>

Compares a LeRobot checkpoint (--policy.path) with what the benchmark gives, before any
episode: one env is reset and its observation, after the env's processors and
--rename_map, is set against the checkpoint's input features (keys, shapes, dtypes,
ranges), its normaliser's stats, and its action (dimension, range vs the env's bounds).
Prints a table with the fix of each mismatch (a --rename_map, an image size flag, ...).
Exit 0: it fits (warnings may be listed); 2: a hard mismatch (eval refuses it too)."""


def _first_observation(bench: Any, seed: int) -> tuple[str, Any, Any]:
    """(the benchmark's first task, one reset's observation with `seed`, its action space)."""
    task = next(t for names in bench.tasks().values() for t in names)
    env = bench.make_task_env(task)
    try:
        obs, _ = env.reset(seed=seed)
        return task, obs, env.action_space
    finally:
        env.close()


def cmd_check(flags: dict[str, str]) -> int:
    from rollbench.episode.context import StepContext, stack_any  # lazy: `rollbench check` only
    from rollbench.policies.lerobot import OWNS_ENV_PROCESSORS, check_checkpoint_dir, read_config  # lazy: a plugin
    from rollbench.policies.lerobot_check import observed, preflight, table  # lazy: `rollbench check` only
    from rollbench.rendering import apply_backend, check_user_backend, choose_backend  # lazy: `rollbench check` only

    cfg = config_from_flags(flags)
    if cfg.policy.type != "lerobot":
        raise ConfigError(f"rollbench check compares a LeRobot checkpoint (--policy.path=DIR) with a benchmark; "
                          f"--policy.type={cfg.policy.type} has no checkpoint to check")
    cfg = resolved(cfg)
    ckpt = check_checkpoint_dir(cfg.policy)
    bench = cfg.env
    bench.check_available()
    check_user_backend(bench)  # before validate_tasks: listing the tasks can import MuJoCo
    bench.validate_tasks()
    raw = read_config(ckpt)
    owns = raw.get("type") in OWNS_ENV_PROCESSORS
    if owns:  # X-VLA: LIBERO only; what LeRobot says of its model is read before any env exists
        from rollbench.policies.lerobot_xvla import model_action_dim, require_libero  # lazy: X-VLA checkpoints only

        require_libero(bench, ckpt, str(raw["type"]))
        width = model_action_dim(raw)
    apply_backend(choose_backend(cfg.render_device))
    task, obs, action_space = _first_observation(bench, cfg.seed)
    ctx = StepContext(bench, cfg.policy, cfg.seed)  # what a run's policy would be given, without the policy
    gives = observed(ctx.policy_batch(stack_any([obs]), ctx.processors[0]))
    if owns:  # what its own env processors make of the observation
        from rollbench.policies.lerobot_xvla import policy_view  # lazy: X-VLA checkpoints only

        gives, action_space = policy_view(gives, width)
    rows = preflight(ckpt, gives, action_space, bench, cfg.policy.options)
    print(f"checkpoint {ckpt}\nagainst --env.type={bench.type_name} (task {task}, one reset with seed {cfg.seed})\n")
    print(table(rows))
    hard, soft = ([r for r in rows if r.status == status] for status in ("hard", "soft"))
    print(f"\n{len(rows) - len(hard) - len(soft)} ok, {len(soft)} warnings, {len(hard)} mismatches: "
          + ("rollbench eval refuses this checkpoint with these flags" if hard else "it fits"))
    return 2 if hard else 0


def adaptive_line(a: dict[str, Any], n_tasks: int, per_task: list[dict[str, Any]] | None = None) -> str:
    """What --eval.ci_width, --eval.versus or --eval.perturb_stop did, in one line."""
    if "versus" in a:
        decided = [t["stop"]["reason"] for t in per_task or [] if t["stop"]["reason"] in ("better", "worse", "equivalent")]
        counts = ", ".join(f"{decided.count(d)} {d}" for d in ("better", "worse", "equivalent") if d in decided)
        design = ", the fixed-budget design" if a.get("design") == "fixed" else ""
        line = (f"sequential comparison against {a['versus']} (--eval.versus{design}, a look every {a['block']} episodes, "
                f"alpha {a['alpha']:g} over {n_tasks} tasks): this run is {counts or 'not decided on any task'}; "
                f"{a['episodes_saved']} of {n_tasks * a['max_episodes']} episodes saved")
    elif "perturb_stop" in a:
        n = n_tasks * a["stops_per_task"]
        line = (f"adaptive sweep (--eval.perturb_stop=paired, a look every {a['block']} episodes, alpha {a['alpha']:g} "
                f"over {n_tasks * (a['stops_per_task'] - 1)} conditions x tasks): {a['tasks_stopped_early']} of {n} "
                f"(task, condition)s stopped before {a['max_episodes']} episodes, {a['episodes_saved']} of "
                f"{n * a['max_episodes']} episodes saved")
    else:
        n = n_tasks * a.get("stops_per_task", 1)
        what = "(task, condition)s" if "stops_per_task" in a else "tasks"
        line = (f"adaptive (--eval.ci_width={a['ci_width']}, a look every {a['block']} episodes): "
                f"{a['tasks_stopped_early']} of {n} {what} stopped before {a['max_episodes']} episodes, "
                f"{a['episodes_saved']} of {n * a['max_episodes']} episodes saved")
    if a["tasks_running"]:
        line += f"; {a['tasks_running']} {'(task, condition)s' if 'stops_per_task' in a else 'tasks'} not decided yet"
    if a["episodes_ran_past_stop"]:
        line += f"; {a['episodes_ran_past_stop']} finished past their task's stop before it was known (not counted)"
    return line


def dataset_line(d: dict[str, Any]) -> str:
    """Where --eval.recording wrote its dataset, and how to load or push it."""
    return (f"dataset: {d['episodes']} episodes ({d['record']}) in {d['root']}, repo id {d['repo_id']}: "
            f"LeRobotDataset({d['repo_id']!r}, root={d['root']!r}); to share it: "
            f"hf upload --repo-type=dataset {d['repo_id']} {d['root']}")


def draw_report(output_dir: Path) -> Path | None:
    """report.html from what the close wrote; a page that cannot be drawn costs no result."""
    from rollbench.report.report import draw_report as draw  # lazy: matplotlib, only once a run has closed

    return draw(output_dir)


def cmd_eval(flags: dict[str, str], argv: list[str]) -> int:
    from rollbench import checks, lifecycle  # lazy: --help and list stay fast
    from rollbench.results.summary import table  # lazy: `rollbench eval` only

    cfg = config_from_flags(flags)
    try:
        kind = EXECUTORS.get(cfg.executor)  # an unknown name is refused before a checkpoint downloads
    except UnknownNameError as err:
        raise ConfigError(f"--executor={cfg.executor}: {err}") from None
    kind.options(cfg)  # its --executor.* flags, before anything is built
    checks.check_outputs(cfg)  # so is a path that takes no file (run_eval checks it again, for its other callers)
    cfg = resolved(cfg)
    executor: Executor = kind.for_run(cfg, flags)
    outcome = lifecycle.run_eval(cfg, executor, command=argv, view=draw_report if cfg.eval.report else None)
    if outcome.info is None:  # a shard child: its launcher closes the run
        print(f"{outcome.ran} episodes run {outcome.how} for shard {cfg.eval.shard_id} of {cfg.eval.num_shards}; "
              f"the launcher closes the run in {outcome.output_dir}")
        return 0 if outcome.ok else 1
    info = outcome.info.to_json()
    _print_results(info, table(info), f"{outcome.ran} episodes run {outcome.how}; {info['status']} results in "
                   f"{outcome.output_dir / 'eval_info.json'}")
    if outcome.report is not None:
        print(f"report: {outcome.report}")
    if outcome.failed:
        shown = [(t["task_group"], t["task"], f) for t in info["per_task"] for f in t["failed"]][:5]
        for group, task, f in shown:
            first = (f["error"] or "").strip().splitlines()[0] if f["error"] else "unknown error"
            print(f"failed: {group}/{task} episode {f['episode_index']}: {first}", file=sys.stderr)
        print(f"{outcome.failed} episodes failed (infrastructure errors, not counted in success rates); "
              f"full errors in eval_info.json 'per_task[].failed'; rerun the same command to retry them")
    for problem in outcome.problems:
        print(problem, file=sys.stderr)
    return 0 if outcome.ok else 1


def _print_results(info: dict[str, Any], table: str, closing: str) -> None:
    """A closed run on the terminal: the table, a sweep's conditions, the closing line, a stop
    rule's and a recording's lines."""
    print(table)
    if "per_condition" in info:
        from rollbench.report.sweep import lines  # lazy: a sweep (--eval.perturb) only

        print("\nthe table above is the control; --eval.perturb's conditions on the same seeds:")
        print("\n".join(lines(info["per_condition"])))
    print(f"\n{closing}")
    if "adaptive" in info:
        print(adaptive_line(info["adaptive"], len(info["per_task"]), info["per_task"]))
    if "dataset" in info:
        print(dataset_line(info["dataset"]))


def cmd_tune(flags: dict[str, str]) -> int:
    from rollbench import checks, tune  # lazy: `rollbench tune` only (--help, list stay fast)

    cfg = config_from_flags(flags)
    if cfg.workers == "auto":
        raise ConfigError("--workers=auto is for rollbench eval; rollbench tune measures and recommends workers itself")
    path = writable.output_file("--tune.output", str(tune.default_tune_path(cfg)), parents=True)  # before a download and the probe
    checks.check_benchmark(cfg)  # as eval checks it: one line here, not a failed probe process
    cfg = resolved(cfg)
    probe = tune.measure(cfg)
    rec = tune.recommend(probe)
    command = tune.eval_command(flags, rec)
    stored = tune.save(path, probe, rec, command, cfg)  # also stored for later --workers=auto runs
    print(tune.report(probe, rec, stored))
    print(f"\nrun it:\n  {command}\n\nprobe and recommendation: {path}")
    return 0


def cmd_merge(positional: list[str], flags: dict[str, str]) -> int:
    from rollbench.close import merge_dir  # lazy: a command's code loads when it runs (--help, list stay fast)
    from rollbench.results import store, summary  # lazy: `rollbench merge` only

    if len(positional) != 1:
        raise ConfigError("rollbench merge takes one directory: rollbench merge DIR")
    if flags:
        raise ConfigError(f"unknown flag --{next(iter(flags))} for rollbench merge")
    root = Path(positional[0])
    if root.is_dir():  # it takes eval_info.json and report.html: checked before the logs are read
        writable.output_dir("rollbench merge DIR", str(root))
    config = store.read_manifest(root)
    info = merge_dir(root, config_from_dict(config), rerun_argv({**config, "output_dir": str(root)})).to_json()
    draw_report(root)
    _print_results(info, summary.table(info), f"merged into {root / 'eval_info.json'}: {info['status']}")
    if info["status"] != "complete":
        missing = info["missing_units"]
        shown = ", ".join(f"{m['task_group']}/{m['task']}#{m['episode_index']}" for m in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        print(f"partial: {len(missing)} units missing ({shown}{more}); {info['overall']['n_failed']} failed", file=sys.stderr)
        return 1
    return 0


#: `rollbench list` keeps each line of its overview within this many characters and shows
#: at most LIST_SHOWN task names of a group
LIST_WIDTH = 120
LIST_SHOWN = 3


def _clip(text: str, width: int) -> str:
    """`text`, cut to `width` characters with a trailing `...` when longer."""
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def _group_preview(group: str, tasks: list[str]) -> str:
    """`    group (n): a, b, c, ... (+k more)`: the first task names that fit in LIST_WIDTH
    (whole; the first one is cut to fit when even it alone is too long)."""
    head = f"    {group} ({len(tasks)}): "
    if not tasks:
        return head + "(none)"

    def line(shown: list[str]) -> str:
        rest = len(tasks) - len(shown)
        return head + ", ".join(shown) + (f", ... (+{rest} more)" if rest else "")

    shown: list[str] = []
    for task in tasks[:LIST_SHOWN]:
        if len(line([*shown, task])) > LIST_WIDTH:
            break
        shown.append(task)
    if not shown:
        room = LIST_WIDTH - len(line([""]))
        shown = [_clip(tasks[0], max(room, 20))]
    return line(shown)


def _load_listing(name: str) -> tuple[str, dict[str, list[str]]]:
    """A benchmark's one-line description and its groups of tasks, built with stdout and
    stderr captured: simulator packages print while their benchmarks are built (hf-libero's
    `[info] using task orders ...`, once per suite); that goes to the debug log (--debug)."""
    cls = BENCHMARKS.get(name)
    desc = ((cls.__doc__ or "").strip().splitlines() or [""])[0]
    noise = io.StringIO()
    try:
        with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
            cfg = cls()
            cfg.check_available()
            groups = cfg.list_groups()
    finally:
        for line in noise.getvalue().splitlines():
            if line.strip():
                log.debug("%s: %s", name, line)
    return desc, groups


def cmd_list(positional: Sequence[str] = ()) -> int:
    """`rollbench list`: every benchmark with its groups (a few tasks of each) and the policy
    types; `rollbench list BENCHMARK`: that benchmark's groups with every task, one a line."""
    names = BENCHMARKS.names()
    if len(positional) > 1:
        raise ConfigError(f"rollbench list takes at most one benchmark: rollbench list [BENCHMARK] (got {' '.join(positional)})")
    if positional:
        name = positional[0]
        if name not in names:
            raise ConfigError(f"unknown benchmark {name!r}.{did_you_mean(name, names)} Benchmarks: {', '.join(names)}")
        desc, groups = _load_listing(name)  # unavailable: one `rollbench: error:` line (exit 2)
        print(f"{name}: {desc}")
        for group, tasks in groups.items():
            print(f"  {group} ({len(tasks)}):")
            for task in tasks:
                print(f"    {task}")
        return 0
    print("benchmarks (--env.type):")
    for name in names:
        try:
            desc, groups = _load_listing(name)
        except RollbenchError as err:
            print(f"  {name}: unavailable: {message_line(err)}")
            continue
        except Exception as err:  # a broken third-party plugin must not break the listing
            print(f"  {name}: cannot load ({type(err).__name__}: {message_line(err)})")
            continue
        print(_clip(f"  {name}: {desc}", LIST_WIDTH))
        for group, tasks in groups.items():
            print(_group_preview(group, tasks))
    print("\npolicy types (--policy.type):")
    for name in POLICIES.names():
        print(f"  {name}")
    print("\nexecutors (--executor):")
    for name in EXECUTORS.names():
        print(f"  {name}")
    print("\n`rollbench list BENCHMARK` lists every task of one benchmark.")
    return 0


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is now (pytest and embedding programs swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = quiet.terminal(sys.stderr)  # not the debug log a thread's prints go to meanwhile
        super().emit(record)


def _setup_logging(debug: bool) -> None:
    # our own handler on the package logger: basicConfig is a no-op when the host
    # program (or pytest) already configured the root logger
    for h in list(log.handlers):
        if isinstance(h, _StderrHandler):
            log.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.DEBUG if debug else logging.INFO)
    quiet.install(debug)  # other packages' logging, warnings and encoder banners: to the debug log


def _dispatch(argv: list[str]) -> int:
    """Run the command `argv` names; its exit code (errors are `main`'s to print)."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(main_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"rollbench {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}.{did_you_mean(command, COMMANDS)} Commands: {', '.join(COMMANDS)}")
    load_plugins()
    if "-h" in rest or "--help" in rest:
        print(command_help(command))
        return 0
    flags, positional = parse_flags(rest)
    if command not in ("eval", "tune", "check"):
        flags.pop("debug", None)
    if command in ("eval", "tune", "check"):
        if positional:
            raise ConfigError(f"unexpected argument {positional[0]!r}; flags look like --env.type=metaworld")
        if command == "check":
            return cmd_check(flags)
        return cmd_eval(flags, ["rollbench", *argv]) if command == "eval" else cmd_tune(flags)
    if command == "merge":
        return cmd_merge(positional, flags)
    if command == "serve":
        if positional:
            raise ConfigError(f"unexpected argument {positional[0]!r}; flags look like --policy.type=expert")
        from rollbench.serve import serve_main  # lazy: `rollbench serve` only

        return serve_main(flags)
    if command in ("report", "compare"):
        from rollbench.report import compare_main, report_main  # lazy: `rollbench report` and `compare` only

        return (report_main if command == "report" else compare_main)(positional, flags)
    if flags:
        raise ConfigError(f"unknown flag --{next(iter(flags))} for rollbench list; usage: rollbench list [BENCHMARK]")
    return cmd_list(positional)


def command_help(command: str) -> str:
    """`rollbench COMMAND --help`: every flag of COMMAND."""
    from rollbench.report import COMPARE_HELP, REPORT_HELP  # lazy: a command's own help
    from rollbench.serve import serve_help  # lazy: a command's own help

    helps = {"eval": eval_help, "tune": tune_help, "merge": lambda: MERGE_HELP, "list": lambda: LIST_HELP,
             "report": lambda: REPORT_HELP, "compare": lambda: COMPARE_HELP, "serve": serve_help,
             "check": lambda: CHECK_HELP}
    return helps[command]()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or any(a.startswith("--debug=") and a.split("=", 1)[1].lower() in ("true", "1") for a in argv)
    _setup_logging(debug)
    try:
        return _dispatch(argv)
    except RollbenchError as err:
        if debug:
            raise
        print(f"rollbench: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("rollbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rollbench ... | head`: the reader left; nothing to say to it
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the interpreter's final flush must not fail)
        return 141
    except Exception as err:
        if debug:
            raise
        print(f"rollbench: unexpected error: {type(err).__name__}: {err} (rerun with --debug for the traceback)", file=sys.stderr)
        return 1
