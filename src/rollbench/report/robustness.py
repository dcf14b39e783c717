"""report.html's "Robustness" section, for a sweep (`--eval.perturb`; docs/robustness.md).

    eval_info.json per_condition ─▶ table (rate, CI, paired difference vs the control, Holm)
                                 ─▶ per axis: success against the level (the control at rest)
    videos/ (first episodes of every condition) ─▶ one still per condition beside the control's

A run without --eval.perturb gets nothing from here: its page is what it always was.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image  # matplotlib's dependency, as report.html's plots are

from rollbench import perturb
from rollbench.errors import ConfigError
from rollbench.report import conditions, plots
from rollbench.report.html import esc, table
from rollbench.report.runs import Episode, LoadedRun, TaskKey

STILL_PX = 192  # shown size of a still; the video's own frames are --eval.video_size


def section(run: LoadedRun) -> Iterator[str]:
    per_cond = run.info.get("per_condition")
    if not isinstance(per_cond, list):
        return
    yield "<h2>Robustness</h2>"
    yield ('<p class="muted">Every condition ran the control\'s episodes (same seeds, same initial states) with one '
           "axis away from rest. Difference: condition − control on the episode pairs both finished, with the exact "
           "conditional 95% interval of McNemar's test (it excludes 0 exactly when p < 0.05); p: exact McNemar on the discordant pairs, Holm-adjusted over the conditions. Lost / gained: the pairs the control won and the "
           "condition lost, and the reverse.</p>")
    yield table(("condition", "episodes", "success", "95% CI", "vs control, points [95% CI]",
                 "lost / gained pairs", "p Holm"), [_row(c) for c in per_cond])
    axes = conditions.axis_levels(per_cond)
    if axes:
        yield "<h3>Success against each axis's level</h3>"
        yield plots.degradation({name: [_level(level, c) for level, c in points] for name, points in axes.items()})
        yield ('<p class="muted">Whiskers: 95% Wilson interval; grey: the control, at the axis\'s rest level; '
               "each other point is one condition, the other axes at rest.</p>")
    yield "<h3>What each condition does</h3>"
    yield from _stills(run)


def _row(c: dict[str, Any]) -> tuple[object, ...]:
    rate, ci = c.get("pc_success"), c.get("pc_success_ci95")
    v = c.get("vs_control")
    if v is None:
        diff, pairs, p = "(control)", "", ""
    elif v.get("n_pairs"):
        lo, hi = v["difference_ci95"]
        diff = f"{v['difference_pc']:+.1f} [{lo:+.1f}, {hi:+.1f}]"
        pairs = f"{v['only_control']} / {v['only_condition']} of {v['n_pairs']}"
        p = f"{v.get('p_holm', v['p_mcnemar']):.3g}"
    else:
        diff, pairs, p = "no pairs", "", ""
    return (c.get("condition") or "control", c.get("n_episodes"), "-" if rate is None else f"{rate:.1f}%",
            f"{ci[0]:.1f}–{ci[1]:.1f}" if ci else "-", diff, pairs, p)


def _level(level: float, c: dict[str, Any]) -> plots.Level:
    ci = c.get("pc_success_ci95")
    return plots.Level(level, c.get("pc_success"), (ci[0], ci[1]) if ci else None, not c.get("condition"))


def _filmed(split: dict[str, LoadedRun]) -> tuple[TaskKey, Episode] | None:
    """The control's filmed episode to show: the longest (a few steps show little), first task on ties."""
    control = split[""]
    best: tuple[TaskKey, Episode] | None = None
    for key, t in control.tasks.items():
        for e in t.episodes:
            if e.video and (best is None or (e.n_steps or 0) > (best[1].n_steps or 0)):
                best = (key, e)
    return best


def _stills(run: LoadedRun) -> Iterator[str]:
    try:
        import av  # optional: PyAV (the video extra)
    except ImportError:
        yield ('<p class="muted">No frames: decoding the videos needs PyAV (`pip install \'rollbench[video]\'`), '
               "which is not installed here.</p>")
        return
    split = conditions.split(run)
    chosen = None if split is None else _filmed(split)
    if split is None or chosen is None:
        why = ("no episode log beside eval_info.json names the conditions' episodes" if split is None
               else "this run filmed no episode (--eval.max_episodes_rendered=0?)")
        yield f'<p class="muted">No frames: {why}.</p>'
        return
    key, episode = chosen
    figures, middle = [], None
    for cid, part in split.items():
        e = next((x for x in part.tasks[key].episodes if x.index == episode.index and x.video), None)
        if e is None or e.video is None:
            figures.append(f'<figure><figcaption><b>{esc(cid or "control")}</b><br>not filmed</figcaption></figure>')
            continue
        image_axes = list(perturb.condition(cid).image_levels)
        try:
            uri, t, n = _still(av, run.root / e.video, middle, cid if image_axes else None, e.seed)
        except (av.FFmpegError, OSError, IndexError) as err:  # a torn or empty video: say so, draw the rest
            figures.append(f'<figure><figcaption><b>{esc(cid or "control")}</b><br>unreadable video {esc(e.video)}: '
                           f'{esc(err)}</figcaption></figure>')
            continue
        middle = n // 2 if middle is None else middle
        outcome = '<span class="ok">success</span>' if e.success else '<span class="bad">failure</span>'
        figures.append(f'<figure><img src="{uri}" width="{STILL_PX}" height="{STILL_PX}" alt="{esc(cid or "control")}">'
                       f'<figcaption><b>{esc(cid or "control")}</b> {outcome}<br>t = {t:.2f} s · '
                       f'episode of {e.n_steps} steps'
                       + ("<br>the filmed frame as the policy's camera sees it under " + esc(", ".join(image_axes))
                          if image_axes else "") + _told(run, key, cid) + '</figcaption></figure>')
    name = run.tasks[key].name
    yield (f'<p class="muted">{esc(name)}, episode {episode.index} (seed {episode.seed}) under each condition, at the '
           "time of the middle frame of the control's video (the last frame of a video that ended sooner); "
           "the videos are in videos/.</p>")
    yield f'<div class="videos">{"".join(figures)}</div>'


def _told(run: LoadedRun, key: TaskKey, cid: str) -> str:
    """A caption line with the instruction a language axis gave the policy ("" for none)."""
    cond = perturb.condition(cid) if cid else perturb.CONTROL
    if cond.get("language.drop"):
        return "<br>no instruction"
    if not cond.get("language.paraphrase"):
        return ""
    entry: dict[str, Any] = next((t for t in run.info.get("per_task", []) if (t.get("task_group"), t.get("task_id")) == key), {})
    table = str(((run.config or {}).get("eval") or {}).get("paraphrases") or "")
    try:
        told = perturb.instruction(cond, table, run.tasks[key].name, str(entry.get("description", "")))
    except ConfigError:  # a run.json without its table: say nothing rather than guess
        return ""
    return f"<br>instruction: “{esc(told)}”"


def _still(av: Any, path: Path, index: int | None, cid: str | None = None, seed: int | None = None) -> tuple[str, float, int]:
    """(JPEG data URI, time in s, frames in the video) of frame `index` of the video at `path`
    (None: its middle frame; the last one when the video is shorter). With `cid`, the frame
    goes through that condition's image axes as the episode with `seed` drew them: the video
    films the simulator, and the image axes act on what the policy sees."""
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    i = len(frames) // 2 if index is None else min(index, len(frames) - 1)
    image = frames[i].to_image()
    if cid is not None:
        image = Image.fromarray(perturb.preview(cid, np.asarray(image.convert("RGB")), seed or 0))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=85)
    uri = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return uri, float(frames[i].time or 0.0), len(frames)
