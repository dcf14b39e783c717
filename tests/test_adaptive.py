"""Adaptive evaluation (`--eval.ci_width`): a task stops at the first block whose whole prefix
has a 95% Wilson interval at most that wide, so the result is the fixed run's prefix, the
same for any workers, batch size, mode, shard split, executor and resume point."""

from __future__ import annotations

import io
import json
import random
import signal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import load_info, per_episode, run_subprocess
from rollbench.plan import make_plan
from rollbench.progress import Progress
from rollbench.results.merge import merge
from rollbench.results.records import EpisodeRecord
from rollbench.stopping.adaptive import StopRule, Stops, apply, decide, width

# the random policy on the fake benchmark: ~40% on "near", 0% on "mid" and "far"
BASE = ("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=60")
ADAPTIVE = (*BASE, "--eval.ci_width=0.3")
RULE = StopRule(ci_width=0.3, block=10, max_episodes=60)


# -- the rule ---------------------------------------------------------------------------------


def test_the_rule_stops_at_the_first_block_narrow_enough() -> None:
    rule = StopRule(ci_width=0.2, block=10, max_episodes=50)
    # 10/10: Wilson [0.722, 1], 0.278 wide; 20/20: [0.839, 1], 0.161 wide
    assert width(10, 10) == pytest.approx(0.2775, abs=1e-4)
    stop = decide(rule, dict.fromkeys(range(50), True))
    assert (stop.n_episodes, stop.reason) == (20, "ci_width")
    assert stop.width == pytest.approx(0.1611, abs=1e-4)
    # a rate near one half never gets 0.2 wide within 50 episodes: the maximum stops it
    stop = decide(rule, {i: i % 2 == 0 for i in range(50)})
    assert (stop.n_episodes, stop.reason) == (50, "max_episodes")


def test_the_rule_waits_for_the_whole_prefix_and_skips_failed_units() -> None:
    rule = StopRule(ci_width=0.2, block=10, max_episodes=50)
    outcomes: dict[int, bool | None] = {i: True for i in range(30) if i != 7}
    assert decide(rule, outcomes).reason == "running"  # episode 7 has not finished
    assert decide(rule, outcomes).looked_at == 0
    outcomes[7] = None  # failed (after its retries): finished, no datum
    stop = decide(rule, outcomes)
    # 19/19 at the second block: [0.832, 1], 0.168 wide
    assert (stop.n_episodes, stop.reason) == (20, "ci_width")


def test_a_maximum_that_is_no_multiple_of_the_block_is_looked_at() -> None:
    assert StopRule(0.1, 10, 25).checkpoints() == [10, 20, 25]
    assert StopRule(0.1, 10, 20).checkpoints() == [10, 20]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([True, False, None]), min_size=1, max_size=40), st.integers(1, 12),
       st.floats(0.05, 0.9), st.randoms(use_true_random=False))
def test_live_stops_do_not_depend_on_the_order_records_arrive_in(
    outcomes: list[bool | None], block: int, ci: float, rnd: random.Random,
) -> None:
    rule = StopRule(ci, block, len(outcomes))
    plan = make_plan({"g": ["t"]}, len(outcomes), 0)
    records = [
        EpisodeRecord.from_unit(u, success=bool(o), sum_reward=0.0, max_reward=0.0, n_steps=1,
                                status="ok" if o is not None else "failed")
        for u, o in zip(plan, outcomes, strict=True)
    ]
    expected = decide(rule, dict(enumerate(outcomes)))
    rnd.shuffle(records)
    stops = Stops(rule)
    for rec in records:
        stops.observe(rec)
    assert stops.cutoffs[("g", 0)] == expected.n_episodes
    applied = apply(rule, merge(records, plan))
    assert applied.stops[("g", 0)] == expected
    assert sorted(k[2] for k in applied.merged.records) == list(range(expected.n_episodes or 0))


# -- runs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The fixed 60-episode run, and where the rule stops each task on its results."""
    out = tmp_path_factory.mktemp("fixed")
    res = run_subprocess(*BASE, "--eval.mode=lockstep", "--eval.report=false", f"--output_dir={out}")
    assert res.rc == 0, res.err
    episodes = per_episode(out)
    stops = {}
    for group, task_id in {(k[0], k[1]) for k in episodes}:
        outcomes = {k[2]: v[0] for k, v in episodes.items() if (k[0], k[1]) == (group, task_id)}
        stops[(group, task_id)] = decide(RULE, outcomes).n_episodes
    assert sorted(stops.values()) == [10, 10, 40]  # two tasks stop at the first look, one later
    prefix = {k: v for k, v in episodes.items() if k[2] < stops[(k[0], k[1])]}
    return {"episodes": episodes, "stops": stops, "prefix": prefix}


def check_adaptive(out: Path, fixed: dict) -> dict:
    info = load_info(out)
    assert info["status"] == "complete"
    assert per_episode(out) == fixed["prefix"]
    for task in info["per_task"]:
        want = fixed["stops"][(task["task_group"], task["task_id"])]
        assert task["stop"]["n_episodes"] == want
        assert task["stop"]["saved"] == 60 - want
        assert task["stop"]["reason"] == "ci_width"
        assert task["summary"]["n_episodes"] == want
    assert info["adaptive"]["episodes_saved"] == 180 - sum(fixed["stops"].values())
    check_estimates(info, fixed)
    logged = [json.loads(line) for p in (out / "episodes").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len({(r["task_id"], r["episode_index"]) for r in logged}) == len(logged)  # each unit logged once
    return info


def check_estimates(info: dict, fixed: dict) -> None:
    """Each stopped task: the rule's exact interval (the fixed-n Wilson one kept beside it) and
    unbiased rate; `overall`: the mean of those rates, not the pooled one (stopping/estimates.py)."""
    from rollbench.stats import wilson
    from rollbench.stopping import estimates as stopped

    rates = []
    for task in info["per_task"]:
        key = (task["task_group"], task["task_id"])
        outcomes = {k[2]: v[0] for k, v in fixed["prefix"].items() if (k[0], k[1]) == key}
        est = stopped.task_estimate(RULE.ci_width, RULE.checkpoints(), outcomes, fixed["stops"][key])
        assert est is not None
        assert task["pc_success_ci95"] == task["summary"]["pc_success_ci95"] == [100 * est.ci[0], 100 * est.ci[1]]
        assert task["stop"]["wilson_ci95"] == [100 * x for x in wilson(task["n_success"], task["n_episodes"])]
        assert task["stop"]["pc_success_unbiased"] == 100 * est.rate
        assert task["pc_success"] == 100 * task["n_success"] / task["n_episodes"]  # the prefix's, as LeRobot's
        rates.append(est.rate)
    overall = info["overall"]
    assert overall["pc_success"] == pytest.approx(100 * sum(rates) / len(rates), abs=1e-9)
    assert overall["pc_success_pooled"] == pytest.approx(100 * overall["n_success"] / overall["n_episodes"])
    assert overall["pc_success_ci95"][0] <= overall["pc_success"] <= overall["pc_success_ci95"][1]


@pytest.mark.parametrize(
    "how",
    [
        ("--eval.mode=continuous", "--workers=1"),
        ("--eval.mode=continuous", "--workers=2"),
        ("--eval.mode=continuous", "--workers=2", "--policy.placement=driver"),
        ("--eval.mode=lockstep", "--eval.batch_size=7"),
        ("--eval.mode=lockstep", "--eval.isolation=none"),
        ("--eval.num_shards=2", "--executor=shards"),
    ],
    ids=["workers1", "workers2", "driver", "lockstep-b7", "lockstep-here", "shards2"],
)
def test_an_adaptive_run_is_the_fixed_runs_prefix(tmp_path: Path, fixed: dict, how: tuple[str, ...]) -> None:
    res = run_subprocess(*ADAPTIVE, *how, "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    check_adaptive(tmp_path, fixed)


def test_shards_run_apart_then_merged_give_the_same_prefix(tmp_path: Path, fixed: dict) -> None:
    for k in range(2):
        res = run_subprocess(*ADAPTIVE, "--eval.num_shards=2", f"--eval.shard_id={k}", "--eval.report=false",
                             f"--output_dir={tmp_path}")
        assert res.rc == 0, res.err
    res = run_subprocess("merge", str(tmp_path))
    assert res.rc == 0, res.err
    check_adaptive(tmp_path, fixed)


def test_a_killed_adaptive_run_resumes_to_the_same_prefix(tmp_path: Path, fixed: dict) -> None:
    from test_resume import start_and_stop

    args = (*ADAPTIVE, "--eval.mode=continuous", "--workers=1", "--env.step_sleep_s=0.01", "--eval.report=false")
    rc, _, logged = start_and_stop(args, tmp_path, signal.SIGKILL, after_lines=15)
    assert rc == -signal.SIGKILL and logged >= 15
    res = run_subprocess(*args, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    check_adaptive(tmp_path, fixed)


def test_a_finished_run_resumed_with_a_tighter_width_runs_only_what_it_needs(tmp_path: Path, fixed: dict) -> None:
    res = run_subprocess(*ADAPTIVE, "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    res = run_subprocess(*BASE, "--eval.ci_width=0.25", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    tight = StopRule(0.25, 10, 60)
    want = {}
    for key in fixed["stops"]:
        outcomes = {k[2]: v[0] for k, v in fixed["episodes"].items() if (k[0], k[1]) == key}
        want[key] = decide(tight, outcomes).n_episodes
    assert per_episode(tmp_path) == {k: v for k, v in fixed["episodes"].items() if k[2] < want[(k[0], k[1])]}
    assert json.loads((tmp_path / "run.json").read_text())["config"]["eval"]["ci_width"] == 0.25  # what merge reads


def test_bad_stop_rules_are_refused_in_one_line(tmp_path: Path) -> None:
    for flag, word in (("--eval.ci_width=1.5", "between 0 and 1"), ("--eval.ci_width=0", "between 0 and 1"),
                       ("--eval.ci_block=0", ">= 1")):
        res = run_subprocess(*BASE, flag, f"--output_dir={tmp_path}")
        assert res.rc == 2, res.err
        assert flag in res.err and word in res.err
        assert "Traceback" not in res.err


def test_the_report_shows_how_each_interval_narrowed(tmp_path: Path) -> None:
    res = run_subprocess(*ADAPTIVE, "--eval.report=true", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "adaptive (--eval.ci_width=0.3, a look every 10 episodes): 3 of 3 tasks stopped before 60 episodes" in res.out
    page = (tmp_path / "report.html").read_text()
    section = page[page.index("<h2>Adaptive stopping</h2>"):page.index("<h2>Episode lengths</h2>")]
    assert "of 180 episodes saved" in section and section.count("<svg") == 1
    assert all(name in section for name in ("near", "mid", "far"))
    # the headline and the task table show what eval_info reports: the mean of the task rates,
    # and each stopped task's exact interval, not the pooled rate and Wilson intervals
    overall = load_info(tmp_path)["overall"]
    lo, hi = overall["pc_success_ci95"]
    assert f"{overall['pc_success']:.1f}%" in page and f"the mean of 3 task rates, 95% CI {lo:.1f}–{hi:.1f}" in page
    for task in load_info(tmp_path)["per_task"]:
        lo, hi = task["pc_success_ci95"]
        assert f"{lo:.1f}–{hi:.1f}" in page


@pytest.mark.metaworld
def test_metaworld_adaptive_is_the_fixed_runs_prefix(tmp_path: Path) -> None:
    """The expert, and the expert with action noise (a task below 100% needs more looks)."""
    base = ("eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert",
            "--policy.action_noise=0.5", "--eval.n_episodes=30", "--eval.report=false")
    res = run_subprocess(*base, f"--output_dir={tmp_path / 'fixed'}")
    assert res.rc == 0, res.err
    episodes = per_episode(tmp_path / "fixed")
    rule = StopRule(0.25, 10, 30)
    stops = {key: decide(rule, {k[2]: v[0] for k, v in episodes.items() if (k[0], k[1]) == key}).n_episodes
             for key in {(k[0], k[1]) for k in episodes}}
    assert min(stops.values()) < 30  # something was saved
    res = run_subprocess(*base, "--eval.ci_width=0.25", "--workers=2", f"--output_dir={tmp_path / 'adaptive'}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "adaptive") == {k: v for k, v in episodes.items() if k[2] < stops[(k[0], k[1])]}


# -- one overall in the terminal (issue 47) ----------------------------------------------------


def _records(task_id: int, successes: int, n: int, condition: str = "") -> list[EpisodeRecord]:
    return [EpisodeRecord(task_group="g", task_id=task_id, task=f"t{task_id}", episode_index=i, seed=i,
                          success=i < successes, sum_reward=0.0, max_reward=0.0, n_steps=1, condition=condition)
            for i in range(n)]


def test_an_adaptive_progress_line_shows_the_mean_of_its_tasks_rates() -> None:
    """Tasks stopped after different numbers of episodes: pooling (10 + 0 of 40 = 25%) weighs
    the task that ran longer more, the closing `overall` row does not (the mean: 50%). A fixed
    run (every task the same episodes) keeps the pooled rate, which is its `overall`."""
    recs = [*_records(0, 10, 10), *_records(1, 0, 30), *_records(0, 0, 10, condition="noise")]
    adaptive, fixed = Progress(50, stream=io.StringIO(), counts=lambda r: True), Progress(50, stream=io.StringIO())
    for rec in recs:
        adaptive.update(rec)
        fixed.update(rec)
    assert "success 50.0% (mean of 2 tasks' k/n)" in adaptive.line()  # a sweep's: its control's, as its table
    assert "success 20.0% |" in fixed.line()


def test_a_log_s_last_progress_line_counts_every_episode() -> None:
    """In a log (no terminal) lines come every `every_s`; an adaptive run's total shrinks as its
    tasks stop, so its last episode need not meet the total it last had: the close draws the
    count no line showed (a run of 110 episodes had left "episodes 1/<=300" as its last line)."""
    out = io.StringIO()
    progress = Progress(300, stream=out, every_s=3600, counts=lambda r: True)
    for rec in [*_records(0, 10, 20), *_records(1, 3, 30)]:
        progress.update(rec)
    progress.set_total(50)
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("episodes 1/<=300")
    assert lines[-1].startswith("episodes 50/50 | success 30.0% (mean of 2 tasks' k/n)")
    progress.close()  # nothing new: no second last line
    assert out.getvalue().splitlines() == lines


def test_episodes_past_a_stop_leave_the_progress_count_when_the_stop_comes() -> None:
    """Several workers: episodes 20-29 of task 1 finished before its stop at 20 was known. They
    are logged but not counted (the table's k/n is of the prefix); the progress line recounts
    when the stop comes, so it ends at 40/40 and the table's mean k/n, not 50/40."""
    stop: dict[int, int] = {}
    out = io.StringIO()
    progress = Progress(60, stream=out, every_s=3600,
                        counts=lambda r: r.episode_index < stop.get(r.task_id, 10**9))
    for rec in [*_records(0, 10, 20), *_records(1, 3, 30)]:
        progress.update(rec)
    stop.update({0: 20, 1: 20})
    progress.set_total(40)
    progress.close()
    assert out.getvalue().splitlines()[-1].startswith("episodes 40/40 | success 32.5% (mean of 2 tasks' k/n)")


def test_the_terminal_says_one_overall(tmp_path: Path) -> None:
    """The noisy expert at --eval.ci_width=0.2: tasks stop after 20, 30 and 60 episodes. Before
    (issue 47) the progress line said 55.5 (pooled), the rows' k/n averaged 72.2, the overall
    row 71.8; the rows now show the unbiased rates the overall row is the mean of, the progress
    line the mean of the tasks' k/n, each labelled, and the interval wider than W is explained."""
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", "--policy.action_noise=1.0",
                         "--seed=1", "--eval.n_episodes=100", "--eval.ci_width=0.2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    tasks = info["per_task"]
    progress = [ln for ln in res.err.splitlines() if ln.startswith("episodes ")][-1]
    mean_kn = sum(t["pc_success"] for t in tasks) / len(tasks)
    assert f"success {mean_kn:.1f}% (mean of 3 tasks' k/n)" in progress
    rows = {}
    for line in res.out.splitlines():
        cells = line.split()
        if cells and cells[0] in ("near", "mid", "far", "overall"):
            rows[cells[0]] = (float(cells[2]), float(cells[3][1:-1]), float(cells[4][:-1]))
    for t in tasks:
        assert rows[t["task"]][0] == float(f"{t['stop']['pc_success_unbiased']:.1f}")
    assert rows["overall"][0] == float(f"{info['overall']['pc_success']:.1f}")
    assert info["overall"]["pc_success"] == pytest.approx(sum(t["stop"]["pc_success_unbiased"] for t in tasks) / 3)
    assert all(lo <= point <= hi for point, lo, hi in rows.values())
    wide = [t for t in tasks if t["stop"]["reason"] == "ci_width" and t["pc_success_ci95"][1] - t["pc_success_ci95"][0] > 20]
    assert wide  # this run has one (far, stopped at 60 with an exact interval 21.8 wide)
    notes = " ".join(res.out.split())
    for t in wide:
        assert f"{t['task']} {t['pc_success_ci95'][1] - t['pc_success_ci95'][0]:.1f}" in notes
    assert "wider than --eval.ci_width's 20 points" in notes and "stop.pc_success_unbiased" in notes
