"""`rollbench report DIR`: one self-contained page that shows what an evaluation did.

    DIR/eval_info.json ─┐
    DIR/**/episodes/*.jsonl (timings) ─┴─▶ summary, charts, videos, command ─▶ DIR/report.html

Runs at the end of every eval, so it reads only what the run left and takes well under a
second (MT10 × 10: measured in tests/test_report.py). Works on `lerobot-eval` output too:
sections whose data that writer does not record say so instead of being drawn.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError, did_you_mean
from rollbench.report import plots, robustness
from rollbench.report.html import cards, esc, page, src, table
from rollbench.report.runs import LoadedRun, command_line, load_run
from rollbench.results.log import read_records
from rollbench.results.store import write_text_atomic
from rollbench.stats import wilson
from rollbench.writable import output_file

log = logging.getLogger(__name__)

REPORT = "report.html"
VIDEOS_PER_TASK = 4

REPORT_HELP = f"""usage: rollbench report DIR [--output=PATH] [--videos_per_task=N]

Write DIR/{REPORT}: one self-contained page (inline charts and style, no script, nothing
fetched from the network) with the run's summary (overall success and its 95% Wilson
interval, failed units, wall time, throughput), per-task success with intervals, episode
lengths of successes and failures, throughput and busy workers over time, the videos of
each task's first episodes (failures first; the files stay in DIR/videos/), the command
and the package versions; for a sweep (--eval.perturb), each condition against the
control, success against each axis's level, and a still of every condition. DIR is a rollbench (or lerobot-eval) output directory.

  --output=PATH          where to write the page (default DIR/{REPORT})
  --videos_per_task=N    videos shown per task (default {VIDEOS_PER_TASK}; 0: none)"""


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}%" if n else "-"


def _ci(k: int, n: int) -> str:
    ci = wilson(k, n)
    return "-" if ci is None else f"{100 * ci[0]:.1f}–{100 * ci[1]:.1f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _summary(run: LoadedRun) -> Iterator[str]:
    info, tasks = run.info, list(run.tasks.values())
    k, n = sum(t.k for t in tasks), sum(t.n for t in tasks)
    overall = info.get("overall") or {}
    failed = sum(t.n_failed for t in tasks)
    steps = [e.n_steps for t in tasks for e in t.episodes if e.n_steps is not None]
    wall = overall.get("eval_s")
    wall = float(wall) if isinstance(wall, (int, float)) and wall == wall and wall > 0 else None  # NaN != NaN
    cfg = run.config or {}
    yield f"<h1>{esc(run.describe())}</h1>"
    status = info.get("status", "unknown")
    schema = f" · schema {esc(info['schema_version'])}" if "schema_version" in info else ""
    yield f'<p class="muted">{esc(run.root)} · written by {esc(run.producer)} · status {esc(status)}{schema}</p>'
    if status == "partial" or info.get("missing_units"):
        missing = len(info.get("missing_units") or [])
        yield f'<p class="warn">partial results: {missing} planned units missing, {failed} failed; rerun the same command to finish them.</p>'
    headline = (_pct(k, n), f"success, 95% CI {_ci(k, n)} ({k}/{n})")
    rate, ci = overall.get("pc_success"), overall.get("pc_success_ci95")
    if "pc_success_pooled" in overall and isinstance(rate, (int, float)) and isinstance(ci, list):
        # a stopped run: the mean of the tasks' unbiased rates, not the pooled one (docs/adaptive.md)
        headline = (f"{rate:.1f}%", f"success, the mean of {len(tasks)} task rates, 95% CI {ci[0]:.1f}–{ci[1]:.1f} ({k}/{n} pooled)")
    items = [
        headline,
        (str(n), f"episodes over {len(tasks)} task{'s' * (len(tasks) != 1)}"),
        (str(failed), "failed units (crashes, not counted in success)"),
    ]
    if wall:
        items.append((_duration(wall), "wall time"))
        rate = f"{(n + failed) / wall:.2f} episodes/s"
        items.append((rate, f"{sum(steps) / wall:,.0f} env steps/s" if steps else "throughput"))
    policy, env = cfg.get("policy") or {}, cfg.get("env") or {}
    if policy:
        items.append((str(policy.get("type")), f"policy {policy.get('path') or ''}".strip()))
    if env:
        items.append((str(env.get("type")), f"benchmark, task {env.get('task')}"))
    yield cards(items)


def _tasks(run: LoadedRun) -> Iterator[str]:
    tasks = list(run.tasks.values())
    yield "<h2>Success per task</h2>"
    if any(t.n for t in tasks):
        yield plots.success_bars([plots.Bar(t.name, t.k, t.n, t.ci95) for t in tasks])
    rows = []
    for t in sorted(tasks, key=lambda t: (t.k / t.n if t.n else -1, t.name)):
        steps = [e.n_steps for e in t.episodes if e.n_steps is not None]
        mean = f"{sum(steps) / len(steps):.1f}" if steps else "-"
        ci = _ci(t.k, t.n) if t.ci95 is None else f"{100 * t.ci95[0]:.1f}–{100 * t.ci95[1]:.1f}"
        rows.append((t.name, t.n, _pct(t.k, t.n), ci, mean, t.n_failed))
    yield table(("task", "episodes", "success", "95% CI", "mean length", "failed"), rows)


def _seeds(run: LoadedRun) -> Iterator[str]:
    """--seeds: the run's success per seed, and across seeds."""
    per_seed, across = run.info.get("per_seed"), run.info.get("across_seeds")
    if not isinstance(per_seed, list) or not isinstance(across, dict):
        return
    yield "<h2>Seeds</h2>"
    rows = [(b["seed"], b["n_episodes"], _pct(b["n_success"], b["n_episodes"]), _ci(b["n_success"], b["n_episodes"]))
            for b in per_seed]
    yield table(("seed", "episodes", "success", "95% CI"), rows)
    rate, ci = across.get("pc_success"), across.get("pc_success_ci95")
    of = across.get("pc_success_of")
    if rate is not None and ci and (of is None or "Wilson" in of):
        yield (f'<p>All {across.get("n_seeds")} seeds pooled: <b>{rate:.1f}%</b>, 95% CI {ci[0]:.1f}–{ci[1]:.1f} '
               "(Wilson, every seed's episodes; the tables above pool them too).</p>")
    elif rate is not None and ci:  # an adaptive run: the mean of its tasks' rates
        yield f'<p>All {across.get("n_seeds")} seeds: <b>{rate:.1f}%</b>, 95% CI {ci[0]:.1f}–{ci[1]:.1f} ({esc(of)}).</p>'
    std, noise = across.get("pc_success_std"), across.get("pc_success_std_from_noise")
    if std is not None:
        beside = f"; episode noise alone would give about {noise:.1f}" if noise is not None else ""
        yield (f'<p class="muted">Spread of the per-seed rates: standard deviation {std:.1f} points{beside}. '
               "Each seed runs every task with its own episodes (seed s: s, s+1, ...); for one checkpoint the seed "
               "blocks differ only by which episodes ran, so \"mean ± std over seeds\" is not an interval for the "
               "success rate: the pooled interval above is.</p>")


def _adaptive(run: LoadedRun) -> Iterator[str]:
    """An adaptive run (--eval.ci_width): how each task's interval narrowed, where it stopped."""
    a = run.info.get("adaptive")
    if not isinstance(a, dict):
        return
    if "versus" in a:
        yield from _versus(run, a)
        return
    if "perturb_stop" in a:  # a sweep's conditions against its control: per_condition's stops tell
        return
    # lazy: adaptive runs only; every command's --help imports this module
    from rollbench.stopping.adaptive import StopRule

    rule = StopRule(float(a["ci_width"]), int(a["block"]), int(a["max_episodes"]), int(a.get("seeds", 1)))
    stops = {(t["task_group"], t["task_id"]): t.get("stop") or {} for t in run.info.get("per_task") or []}
    yield "<h2>Adaptive stopping</h2>"
    yield (f'<p class="muted">Each task stopped at the first look (every {rule.block} episodes) whose whole prefix '
           f"of episodes had a 95% Wilson interval at most {100 * rule.ci_width:g} points wide, or at "
           f"{rule.max_episodes} episodes; {a['episodes_saved']} of "
           f"{rule.max_episodes * len(stops) * int(a.get('stops_per_task', 1))} episodes saved. "
           "Band: the interval after each look; dashed line: the stop (green: target met, grey: the maximum).</p>")
    tasks = []
    for t in run.tasks.values():
        stop = stops.get(t.key) or {}
        tasks.append(plots.Narrowing(t.name, [e.success for e in sorted(t.episodes, key=lambda e: rule.position(e.index))],
                                     rule.checkpoints(), stop.get("n_episodes"), str(stop.get("reason"))))
    if tasks:
        yield plots.narrowing(tasks, rule.ci_width, rule.max_episodes)


def _versus(run: LoadedRun, a: dict[str, Any]) -> Iterator[str]:
    """--eval.versus: each task's sequential comparison against the other run, where it stopped."""
    fixed = a.get("design") == "fixed"
    test = (f"an exact group-sequential test with a budget of {a['max_episodes']} episodes" if fixed
            else "an anytime-valid test")
    yield "<h2>Sequential comparison</h2>"
    yield (f'<p class="muted">Against {esc(a["versus"])}: each task stopped at the first look (every {a["block"]} '
           f"episodes) where {test} of this run against that one decided, at level "
           f"{a['alpha']:g} over all tasks (docs/compare.md); {a['episodes_saved']} episodes saved.</p>")
    rows = []
    for t in run.info.get("per_task") or []:
        stop = t.get("stop") or {}
        v = stop.get("versus") or {}
        lo, hi = (v.get("interval") or [None, None])[:2]
        ci = "-" if lo is None else f"{100 * lo:+.1f} to {100 * hi:+.1f}"
        rows.append((t.get("task"), stop.get("reason"), f"{stop.get('n_episodes')} of {stop.get('max_episodes')}",
                     f"{v.get('b_wins', '-')}/{v.get('n_discordant', '-')}", "-" if v.get("e_value") is None else f"{v['e_value']:.3g}", ci))
    interval = "this − other, points (repeated 95% CI)" if fixed else "this − other, points (anytime)"
    yield table(("task", "decision", "episodes", "wins here / discordant", "e-value", interval), rows)


def _lengths(run: LoadedRun) -> Iterator[str]:
    yield "<h2>Episode lengths</h2>"
    finished = [e for t in run.tasks.values() for e in t.episodes]
    eps = [e for e in finished if e.n_steps is not None]
    if not eps:
        why = "no episode finished" if not finished else f"{esc(run.path.name)} records no step counts"
        yield f'<p class="muted">{why}.</p>'
        return
    yield plots.length_histogram([e.n_steps or 0 for e in eps if e.success], [e.n_steps or 0 for e in eps if not e.success])


def _throughput(run: LoadedRun) -> Iterator[str]:
    yield "<h2>Throughput over time</h2>"
    spans = [
        plots.Span(r.finished_at - r.wall_s, r.finished_at, f"{r.writer}/{r.worker}")
        for r in read_records(run.root, recursive=True)
        if r.finished_at > 0
    ]
    if not spans:
        yield f'<p class="muted">no episode log with timings under {esc(run.root)} (episodes/*.jsonl).</p>'
        return
    writers = len({s.worker.split("/", 1)[0] for s in spans})
    yield plots.throughput(spans)
    yield (f'<p class="muted">{len(spans)} logged episodes from {writers} process{"es" * (writers != 1)}; '
           "a worker counts as busy while any of its slots runs an episode; gaps are pauses between resumed runs.</p>")


def _videos(run: LoadedRun, out_dir: Path, per_task: int) -> Iterator[str]:
    yield "<h2>Videos</h2>"
    figures = []
    # the worst tasks first, and failures first within a task: what went wrong is what one looks for
    for t in sorted(run.tasks.values(), key=lambda t: (t.k / t.n if t.n else 0, t.name)):
        filmed = sorted((e for e in t.episodes if e.video), key=lambda e: (e.success, e.index))[:per_task]
        for e in filmed:
            rel = Path(os.path.relpath(run.root / (e.video or ""), out_dir)).as_posix()
            outcome = '<span class="ok">success</span>' if e.success else '<span class="bad">failure</span>'
            detail = " · ".join(x for x in (f"episode {e.index}", f"seed {e.seed}" if e.seed is not None else "",
                                            f"{e.n_steps} steps" if e.n_steps is not None else "") if x)
            figures.append(f'<figure><video controls muted preload="metadata" src="{src(rel)}"></video>'
                           f"<figcaption><b>{esc(t.name)}</b> {outcome}<br>{esc(detail)}</figcaption></figure>")
    if figures:
        yield f'<p class="muted">The first filmed episodes of every task, worst task first, failures first.</p><div class="videos">{"".join(figures)}</div>'
    else:
        why = "none shown (--videos_per_task=0)" if per_task == 0 else "this run recorded none (--eval.max_episodes_rendered=0?)"
        yield f'<p class="muted">No videos: {why}.</p>'


def _failed(run: LoadedRun) -> Iterator[str]:
    rows = []
    for t in run.info.get("per_task", []):
        for f in t.get("failed") or []:
            first = (f.get("error") or "unknown error").strip().splitlines()
            rows.append((t.get("task") or f"{t['task_group']}/{t['task_id']}", f.get("episode_index"), f.get("seed"), first[-1] if first else ""))
    if rows:
        yield "<h2>Failed units</h2>"
        yield '<p class="muted">Infrastructure failures (a crashed or hung worker, after retries); the full tracebacks are in eval_info.json.</p>'
        yield table(("task", "episode", "seed", "error (last line)"), rows)


def _reproduce(run: LoadedRun) -> Iterator[str]:
    yield "<h2>Reproduce</h2>"
    cmd = command_line(run.info)
    if cmd is None:
        yield f'<p class="muted">{esc(run.path.name)} records neither the command nor the config.</p>'
    else:
        text, exact = cmd
        note = "the command as it was run" if exact else "rebuilt from the recorded config (every flag; the original command line was not recorded)"
        yield f'<p class="muted">{note}:</p><pre>{esc(text)}</pre>'
    if run.versions:
        yield table(("package", "version"), sorted(run.versions.items()))
    if run.config:
        yield f"<details><summary>config</summary><pre>{esc(json.dumps(run.config, indent=2))}</pre></details>"


def _videos_flag(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ConfigError(f"--videos_per_task={value!r} is not allowed; it must be a whole number >= 0")
    return n


def render(run: LoadedRun, out: Path, videos_per_task: int = VIDEOS_PER_TASK) -> str:
    """The page's HTML for `run`, with video paths relative to `out`'s directory."""
    body = [
        *_summary(run), *_tasks(run), *_seeds(run), *robustness.section(run), *_adaptive(run), *_lengths(run), *_throughput(run),
        *_videos(run, out.parent, videos_per_task), *_failed(run), *_reproduce(run),
    ]
    return page(f"rollbench report: {run.describe()}", body)


def write_report(output_dir: str | Path, out: str | Path | None = None, videos_per_task: int = VIDEOS_PER_TASK) -> Path:
    """Write the report of the run in `output_dir` (default `output_dir/report.html`); its path."""
    run = load_run(str(output_dir), "rollbench report DIR")
    path = Path(out) if out is not None else run.root / REPORT
    write_text_atomic(path, render(run, path.resolve(), videos_per_task))
    return path


def draw_report(output_dir: Path) -> Path | None:
    """report.html from what a run's close wrote, as `rollbench eval` and `rollbench.Evaluator`
    draw it at a run's end: a page that cannot be drawn costs no result (a warning says so)."""
    try:
        return write_report(output_dir)
    except Exception as err:  # the results are saved; the page is a view of them
        log.warning("could not write %s/report.html (%s: %s); rerun `rollbench report %s`",
                    output_dir, type(err).__name__, err, output_dir)
        return None


def report_main(positional: list[str], flags: dict[str, Any]) -> int:
    """`rollbench report DIR [--output=PATH] [--videos_per_task=N]`: prints the page's path."""
    known = {"output": functools.partial(output_file, "--output"), "videos_per_task": _videos_flag}
    for key in flags:
        if key not in known:
            hint = did_you_mean(key, known, "--{}".format)
            raise ConfigError(f"unknown flag --{key} for rollbench report.{hint} Flags: --output, --videos_per_task")
    if len(positional) != 1:
        got = f"got {len(positional)}: {' '.join(positional)}" if positional else "got none"
        raise ConfigError(f"rollbench report takes one directory, DIR ({got}); usage: rollbench report DIR")
    if not Path(positional[0]).is_dir():
        raise ConfigError(f"rollbench report DIR={positional[0]!r} is not a directory; give a run's --output_dir")
    out = output_file("--output", str(flags["output"])) if "output" in flags else None
    per_task = _videos_flag(str(flags["videos_per_task"])) if "videos_per_task" in flags else VIDEOS_PER_TASK
    print(write_report(positional[0], out, per_task))
    return 0
