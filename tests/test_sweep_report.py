"""A sweep's analysis (--eval.perturb): report.html's Robustness section (table, one curve per
axis, a still of every condition beside the control's) and `rollbench compare` condition by
condition, on real sweeps of the fake benchmark."""

from __future__ import annotations

import base64
import dataclasses
import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import load_info, per_episode, run_subprocess
from rollbench import stats
from rollbench.report import compare_runs, load_run, write_report
from rollbench.report.compare_cmd import text
from rollbench.report.conditions import axis_levels, split
from rollbench.report.report import render
from rollbench.results.log import read_records

BASE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=4", "--workers=1")
A_SWEEP = "--eval.perturb=action.noise=0,1.5;action.latency=2;language.drop=1"
A_CONDITIONS = ["", "action.noise=1.5", "action.latency=2", "language.drop=1"]
# another checkpoint (a noisier expert) under an overlapping sweep
B_SWEEP = ("--policy.action_noise=0.5", "--eval.perturb=action.noise=1.5;action.latency=2,4")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A: a filmed sweep; B: another policy under an overlapping sweep, unfilmed; P: no sweep."""
    root = tmp_path_factory.mktemp("sweeps")
    flags = {"A": (A_SWEEP, "--eval.max_episodes_rendered=1", "--eval.report=true"), "B": B_SWEEP, "P": ()}
    out = {}
    for name, extra in flags.items():
        out[name] = root / name
        res = run_subprocess(*BASE, *extra, f"--output_dir={out[name]}", timeout=300)
        assert res.rc == 0, res.err[-3000:]
    return out


def stills(page: str) -> dict[str, bytes]:
    """The JPEG of each condition's still, by condition."""
    found = re.findall(r'<img src="data:image/jpeg;base64,([^"]+)" width="\d+" height="\d+" alt="([^"]+)">', page)
    return {cond: base64.b64decode(data) for data, cond in found}


def pixels(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), dtype=float)


def test_the_report_of_a_sweep_shows_every_condition_its_axis_curves_and_its_frames(runs: dict[str, Path]) -> None:
    av = pytest.importorskip("av")
    info = load_info(runs["A"])
    page = (runs["A"] / "report.html").read_text()  # the one the eval wrote at its end
    section = page[page.index("<h2>Robustness</h2>"):page.index("<h2>Episode lengths</h2>")]
    for c in info["per_condition"]:
        row = f"<td>{c['condition'] or 'control'}</td><td>{c['n_episodes']}</td><td>{c['pc_success']:.1f}%</td>"
        assert row in section, c["condition"]
        if c["condition"]:
            assert f"<td>{c['vs_control']['p_holm']:.3g}</td></tr>" in section
    # one small plot per axis; the control sits at each axis's rest level
    levels = axis_levels(info["per_condition"])
    assert {a: [x for x, _ in pts] for a, pts in levels.items()} == {
        "action.noise": [0.0, 1.5], "action.latency": [0.0, 2.0], "language.drop": [0.0, 1.0]}
    assert all(pts[0][1]["condition"] == "" for pts in levels.values())
    assert section.count("<svg") == 1 and all(f">{a}<" in section for a in levels)
    # a still of every condition: the middle frame of the longest filmed control episode's
    # video, and the same moment of that episode under each condition
    shown = stills(section)
    assert list(shown) == ["control", *A_CONDITIONS[1:]]
    filmed = [(n, t["task_id"], i) for t in info["per_task"] for i, n in zip(t["metrics"]["episode_ix"], t["metrics"]["n_steps"],
                                                                         strict=True) if i < 1]
    _, task_id, episode = max(filmed, key=lambda f: f[0])
    with av.open(str(runs["A"] / f"videos/all_{task_id}/episode_{episode}.mp4")) as video:
        frames = [f.to_ndarray(format="rgb24").astype(float) for f in video.decode(video=0)]
    assert np.abs(pixels(shown["control"]) - frames[len(frames) // 2]).mean() < 3  # JPEG's loss only
    # the expert ignores the instruction, so its episode is the control's, frame for frame;
    # the action noise moves the point elsewhere
    assert shown["language.drop=1"] == shown["control"]
    assert np.abs(pixels(shown["action.noise=1.5"]) - pixels(shown["control"])).mean() > 0.1


def test_the_section_is_all_a_sweep_adds_and_a_plain_run_gets_none(runs: dict[str, Path], tmp_path: Path) -> None:
    sweep = load_run(str(runs["A"]), "A")
    out = tmp_path / "r.html"

    def ids(page: str) -> str:  # chart ids are numbered per process: one chart more renumbers the rest
        return re.sub(r"\bc\d+-", "c-", page)

    page = ids(render(sweep, out))
    without = ids(render(dataclasses.replace(sweep, info={k: v for k, v in sweep.info.items() if k != "per_condition"}), out))
    start, end = page.index("<h2>Robustness</h2>"), page.index("<h2>Episode lengths</h2>")
    assert page[:start] + page[end:] == without
    assert "Robustness" not in write_report(runs["P"]).read_text()


def test_without_frames_the_section_says_why_in_one_line(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    unfilmed = (write_report(runs["B"])).read_text()
    assert '<p class="muted">No frames: this run filmed no episode (--eval.max_episodes_rendered=0?).</p>' in unfilmed
    monkeypatch.setitem(sys.modules, "av", None)  # PyAV not installed
    page = write_report(runs["A"]).read_text()
    assert "No frames: decoding the videos needs PyAV" in page and "data:image/jpeg" not in page
    assert "<h3>Success against each axis's level</h3>" in page  # the rest of the section stands


def test_two_sweeps_compare_condition_by_condition_on_their_common_conditions(runs: dict[str, Path], tmp_path: Path) -> None:
    a, b = load_run(str(runs["A"]), "A"), load_run(str(runs["B"]), "B")
    cmp = compare_runs(a, b)
    assert [r.name for r in cmp.conditions] == ["control", "action.noise=1.5", "action.latency=2"]
    assert "conditions only in A, left out: language.drop=1" in cmp.warnings
    assert "conditions only in B, left out: action.latency=4" in cmp.warnings
    assert cmp.conditions[0].diff == cmp.overall.diff and cmp.conditions[0].p == cmp.overall.p  # the control's, as before
    # each side's counts are its own per_condition's; the pairs are (condition, task, seed),
    # counted here from the two episode logs
    by = {s: {c["condition"]: c for c in load_info(runs[s])["per_condition"]} for s in "AB"}
    logs = {s: {(r.condition, r.task_id, r.seed): r.success for r in read_records(runs[s])} for s in "AB"}
    for r, cid in zip(cmp.conditions, ["", "action.noise=1.5", "action.latency=2"], strict=True):
        assert (r.a.k, r.a.n) == (by["A"][cid]["n_success"], by["A"][cid]["n_episodes"])
        assert (r.b.k, r.b.n) == (by["B"][cid]["n_success"], by["B"][cid]["n_episodes"])
        pairs = [(ok, logs["B"][k]) for k, ok in logs["A"].items() if k[0] == cid]
        assert r.paired == stats.Paired(*(sum(x == (p, q) for x in pairs) for p, q in
                                          ((True, True), (True, False), (False, True), (False, False))))
    assert [r.p_adj for r in cmp.conditions] == stats.holm([r.p for r in cmp.conditions])
    out = text(cmp)
    assert "per condition (--eval.perturb; all tasks pooled, pairs: condition, task, episode; p Holm across the 3 conditions):" in out
    assert re.search(r"^action\.latency=2 +\d+/12 ", out, re.M)
    html = tmp_path / "c.html"
    res = run_subprocess("compare", str(runs["A"]), str(runs["B"]), f"--html={html}")
    assert res.rc == 0 and "action.noise=1.5" in res.out, res.err
    assert "<h2>B - A per condition</h2>" in html.read_text()


def test_a_sweep_against_itself_pairs_each_condition_s_episodes_with_their_own(runs: dict[str, Path]) -> None:
    a = load_run(str(runs["A"]), "A")
    cmp = compare_runs(a, a)
    assert [r.name for r in cmp.conditions] == ["control", *A_CONDITIONS[1:]]
    for r in cmp.conditions:  # paired with another condition's episode, some pair would differ
        assert r.paired is not None and r.paired.n == 12 and r.paired.only_a == r.paired.only_b == 0, r.name
    parts = split(a)
    assert parts is not None and sorted(e.index for e in parts["action.latency=2"].tasks[("all", 0)].episodes) == [0, 1, 2, 3]


def test_a_sweep_against_a_plain_run_compares_the_control_and_says_so(runs: dict[str, Path]) -> None:
    a, p = load_run(str(runs["A"]), "A"), load_run(str(runs["P"]), "P")
    for x, y, side, other in ((a, p, "A", "B"), (p, a, "B", "A")):
        cmp = compare_runs(x, y)
        assert not cmp.conditions
        assert f"{side} is a sweep (--eval.perturb, 3 conditions) and {other} is not: only the control is compared" in cmp.notes
        assert cmp.overall.paired is not None and cmp.overall.paired.n == 12
        assert cmp.overall.paired.only_a == cmp.overall.paired.only_b == 0  # the control is the plain run


def test_a_run_against_a_sweep_pairs_with_its_control_only(tmp_path: Path) -> None:
    """--eval.versus=A where A is a sweep: A's perturbed episodes (episode indices past its
    control's) are not more of A's episodes; B, running more episodes than A, pairs and stops
    exactly as against A's plain twin."""
    base = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.report=false")
    a_sweep, a_plain = tmp_path / "a_sweep", tmp_path / "a_plain"
    assert run_subprocess(*base, "--eval.n_episodes=20", "--eval.perturb=action.noise=3", f"--output_dir={a_sweep}").rc == 0
    assert run_subprocess(*base, "--eval.n_episodes=20", f"--output_dir={a_plain}").rc == 0
    got = {}
    for name, a in (("vs_sweep", a_sweep), ("vs_plain", a_plain)):
        res = run_subprocess(*base, "--eval.n_episodes=60", "--policy.action_noise=3", f"--eval.versus={a}",
                             f"--output_dir={tmp_path / name}")
        assert res.rc == 0, res.err
        stops = [{k: v for k, v in t["stop"].items() if k != "ran_past_stop"}  # how far it ran on: timing
                 for t in load_info(tmp_path / name)["per_task"]]
        got[name] = (per_episode(tmp_path / name), stops)
    assert got["vs_sweep"] == got["vs_plain"]


def test_fail_if_worse_gates_every_condition_two_sweeps_share(tmp_path: Path) -> None:
    """The expert is no worse than a noisier expert on the control, but worse under a 2-step
    delay (docs/robustness.md): --fail-if-worse fails B=expert against A=noisier, not the reverse."""
    sweep = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=20", "--eval.report=false",
             "--eval.perturb=action.latency=2")
    noisy, expert = tmp_path / "noisy", tmp_path / "expert"
    assert run_subprocess(*sweep, "--policy.action_noise=0.5", f"--output_dir={noisy}").rc == 0
    assert run_subprocess(*sweep, f"--output_dir={expert}").rc == 0
    res = run_subprocess("compare", str(noisy), str(expert), "--fail-if-worse")
    assert res.rc == 1, res.out + res.err
    assert re.search(r"^control .* not significant", res.out, re.M) and "B is worse under action.latency=2" in res.out
    assert run_subprocess("compare", str(expert), str(noisy), "--fail-if-worse").rc == 0
