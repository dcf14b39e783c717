"""Summary statistics and `eval_info.json`: Wilson intervals, LeRobot keys plus ours, no NaN, the table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import load_info
from rollbench.results.summary import aggregate, table
from rollbench.stats import wilson


def strict_json(path: Path):
    def reject(name: str):
        raise AssertionError(f"{name} in {path}")

    return json.loads(path.read_text(), parse_constant=reject)


def wilson_reference(k: int, n: int) -> tuple[float, float]:
    """Wilson (1927) score interval written from the textbook form, z = Φ⁻¹(0.975) from erfinv-free bisection."""
    lo_z, hi_z = 0.0, 5.0
    for _ in range(200):  # solve Φ(z) = 0.975
        mid = (lo_z + hi_z) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < 0.975:
            lo_z = mid
        else:
            hi_z = mid
    z = (lo_z + hi_z) / 2
    p = k / n
    centre = (2 * n * p + z * z) / (2 * (n + z * z))
    spread = z * math.sqrt(z * z + 4 * n * p * (1 - p)) / (2 * (n + z * z))
    return centre - spread, centre + spread


# -- Wilson ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, n, expected",
    [  # published values of the 95% Wilson score interval
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        (5, 10, (0.2366, 0.7634)),
        (1, 10, (0.0179, 0.4042)),
        (81, 263, (0.2553, 0.3662)),
    ],
)
def test_wilson_known_values(k, n, expected):
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(expected[0], abs=1e-4)
    assert hi == pytest.approx(expected[1], abs=1e-4)


def test_wilson_no_trials_is_undefined():
    assert wilson(0, 0) is None


@given(n=st.integers(1, 2000), data=st.data())
def test_wilson_matches_the_textbook_formula(n, data):
    k = data.draw(st.integers(0, n))
    lo, hi = wilson(k, n)
    ref_lo, ref_hi = wilson_reference(k, n)
    assert lo == pytest.approx(max(0.0, ref_lo), abs=1e-9)
    assert hi == pytest.approx(min(1.0, ref_hi), abs=1e-9)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


# -- eval_info.json through a real run -----------------------------------------------


@pytest.fixture
def fake_run(cli, tmp_path):
    """fake: a group (`all`, 3 tasks) and a single task (`far`), expert, 6 episodes each."""
    res = cli(
        "eval", "--env.type=fake", "--env.task=all,far", "--policy.type=expert", "--eval.n_episodes=6",
        "--eval.mode=lockstep", "--eval.batch_size=4", "--seed=7", f"--output_dir={tmp_path}",
    )
    assert res.rc == 0, res.err
    return res, tmp_path


def _mean(xs):
    return sum(xs) / len(xs)


def _check_aggregate(agg: dict, successes: list, sum_rewards: list, max_rewards: list, n_steps: list) -> None:
    n, k = len(successes), sum(successes)
    assert agg["n_episodes"] == n
    assert agg["n_success"] == k
    assert agg["pc_success"] == pytest.approx(100.0 * k / n)
    assert agg["avg_sum_reward"] == pytest.approx(_mean(sum_rewards))
    assert agg["avg_max_reward"] == pytest.approx(_mean(max_rewards))
    assert agg["avg_episode_length"] == pytest.approx(_mean(n_steps))
    ref = wilson_reference(k, n)
    assert agg["pc_success_ci95"] == pytest.approx([100 * max(0.0, ref[0]), 100 * min(1.0, ref[1])], abs=1e-6)
    assert agg["n_failed"] == 0


def test_eval_info_has_lerobot_keys_and_ours(fake_run):
    _, out = fake_run
    info = strict_json(out / "eval_info.json")
    assert info["status"] == "complete"
    assert [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]] == [
        ("all", 0, "near"), ("all", 1, "mid"), ("all", 2, "far"), ("far", 0, "far"),
    ]
    for task in info["per_task"]:
        m = task["metrics"]
        for key in ("sum_rewards", "max_rewards", "successes", "video_paths", "seeds", "episode_ix", "n_steps"):
            assert key in m, key
        assert m["episode_ix"] == list(range(6))
        assert m["seeds"] == [7 + i for i in range(6)]
        assert len(m["sum_rewards"]) == len(m["max_rewards"]) == len(m["successes"]) == len(m["n_steps"]) == 6
        assert all(isinstance(s, bool) for s in m["successes"])
        _check_aggregate(task["summary"], m["successes"], m["sum_rewards"], m["max_rewards"], m["n_steps"])
        # LeRobot main's (#4628) per-task keys at the top of the entry, before its metrics
        keys = list(task)
        assert keys[keys.index("description") + 1:keys.index("metrics")] == [
            "n_episodes", "n_success", "pc_success", "pc_success_ci95"]
        assert {k: task[k] for k in ("n_episodes", "n_success", "pc_success", "pc_success_ci95")} == {
            k: task["summary"][k] for k in ("n_episodes", "n_success", "pc_success", "pc_success_ci95")}
    assert set(info["per_group"]) == {"all", "far"}
    for group, agg in info["per_group"].items():
        tasks = [t["metrics"] for t in info["per_task"] if t["task_group"] == group]
        _check_aggregate(agg, *[[x for m in tasks for x in m[key]] for key in ("successes", "sum_rewards", "max_rewards", "n_steps")])
        assert "video_paths" in agg
    overall = info["overall"]
    every = [t["metrics"] for t in info["per_task"]]
    _check_aggregate(overall, *[[x for m in every for x in m[key]] for key in ("successes", "sum_rewards", "max_rewards", "n_steps")])
    for key in ("avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes", "eval_s", "eval_ep_s"):
        assert key in overall, key
    for agg in (*info["per_group"].values(), overall):  # LeRobot main's order: the two new keys after n_episodes
        keys = list(agg)
        assert keys[keys.index("n_episodes"):keys.index("n_episodes") + 3] == ["n_episodes", "n_success", "pc_success_ci95"]
    assert overall["eval_s"] > 0
    assert overall["eval_ep_s"] == pytest.approx(overall["eval_s"] / overall["n_episodes"])
    # the same task in two groups is one episode stream: same seeds, same results
    assert info["per_task"][2]["metrics"] == info["per_task"][3]["metrics"]
    # the expert does not solve every `far` episode within 20 steps: the rates are not trivially 100%
    assert 0 < info["per_group"]["far"]["pc_success"] < 100


def test_eval_info_holds_config_and_versions(fake_run):
    _, out = fake_run
    info = strict_json(out / "eval_info.json")
    cfg = info["config"]
    assert cfg["env"]["type"] == "fake" and cfg["env"]["task"] == "all,far"
    assert cfg["policy"]["type"] == "expert"
    assert cfg["eval"]["n_episodes"] == 6 and cfg["eval"]["batch_size"] == 4 and cfg["eval"]["mode"] == "lockstep"
    assert cfg["seed"] == 7
    import gymnasium
    import numpy

    from rollbench import __version__

    v = info["versions"]
    assert v["rollbench"] == __version__
    assert v["numpy"] == numpy.__version__
    assert v["gymnasium"] == gymnasium.__version__
    assert "python" in v


def test_no_nan_anywhere_in_the_output_dir(fake_run):
    _, out = fake_run
    strict_json(out / "eval_info.json")
    strict_json(out / "run.json")
    lines = [ln for f in sorted((out / "episodes").glob("*.jsonl")) for ln in f.read_text().splitlines()]
    assert len(lines) == 4 * 6
    for line in lines:
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in episode log"))


def test_summary_table_has_one_row_per_task_with_success_and_ci(fake_run):
    res, out = fake_run
    info = load_info(out)
    lines = res.out.splitlines()
    header = lines[0].split()
    assert header[:3] == ["task", "episodes", "success"]
    assert "95%" in header and "CI" in header
    for task in info["per_task"]:
        name = f"{task['task_group']}/{task['task']}" if task["task"] != task["task_group"] else task["task"]
        rows = [ln for ln in lines if ln.split() and ln.split()[0] == name]
        assert len(rows) == 1, (name, res.out)
        s = task["summary"]
        lo, hi = s["pc_success_ci95"]
        assert rows[0].split()[1:5] == [str(s["n_episodes"]), f"{s['pc_success']:.1f}", f"[{lo:.1f},", f"{hi:.1f}]"]
    overall = [ln for ln in lines if ln.startswith("overall")]
    assert len(overall) == 1
    assert f"{info['overall']['pc_success']:.1f}" in overall[0]


def test_summary_table_of_single_task_groups_has_no_duplicate_rows(cli, tmp_path):
    res = cli("eval", "--env.type=fake", "--env.task=near,far", "--policy.type=expert", "--eval.n_episodes=2",
              "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    firsts = [ln.split()[0] for ln in res.out.splitlines() if ln.split() and not ln.startswith("-")]
    assert firsts[:4] == ["task", "near", "far", "overall"]


@pytest.mark.metaworld
def test_metaworld_eval_info(cli, tmp_path):
    res = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", "--policy.type=expert", "--eval.n_episodes=2",
              "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = strict_json(tmp_path / "eval_info.json")
    (task,) = info["per_task"]
    assert (task["task_group"], task["task_id"], task["task"]) == ("reach-v3", 0, "reach-v3")
    assert task["description"] == "Reach a goal position"
    assert set(info["per_group"]) == {"reach-v3"}
    from importlib import metadata

    assert info["versions"]["metaworld"] == metadata.version("metaworld")
    assert info["versions"]["mujoco"] == metadata.version("mujoco")
    rows = [ln for ln in res.out.splitlines() if ln.startswith("reach-v3")]
    assert len(rows) == 1


@pytest.mark.parametrize(("k", "n", "interval"), [(9, 10, [59.58, 98.21]), (14, 20, [48.10, 85.45]), (14, 30, [30.23, 63.86])])
def test_intervals_are_lerobot_main_s(k: int, n: int, interval: list[float]) -> None:
    """The counts and intervals LeRobot main's own tests expect of its eval_info.json (#4628,
    tests/scripts/test_lerobot_eval_summary.py: a task of 9/10, a group of 14/20, overall 14/30)."""
    from rollbench.results.records import EpisodeRecord

    recs = [EpisodeRecord(task_group="g", task_id=0, task="t", episode_index=i, seed=i, success=i < k,
                          sum_reward=0.0, max_reward=0.0, n_steps=1) for i in range(n)]
    agg = aggregate(recs)
    assert (agg["n_episodes"], agg["n_success"], agg["pc_success"]) == (n, k, 100.0 * k / n)
    assert agg["pc_success_ci95"] == pytest.approx(interval, abs=0.005)


# -- an adaptive run's closing table (issue 47) ------------------------------------------------


def _entry(task_id: int, name: str, k: int, n: int, ci: list[float], stop: dict) -> dict:
    summary = {"n_episodes": n, "pc_success": 100.0 * k / n, "pc_success_ci95": ci, "avg_episode_length": 5.0,
               "n_failed": 0}
    return {"task_group": "all", "task_id": task_id, "task": name, "summary": summary, "stop": stop}


def _adaptive_info(tasks: list[dict], overall: float, ci: list[float], of: str, rule: dict) -> dict:
    n = sum(t["summary"]["n_episodes"] for t in tasks)
    return {"per_task": tasks, "per_group": {}, "adaptive": rule,
            "overall": {"n_episodes": n, "pc_success": overall, "pc_success_ci95": ci, "avg_episode_length": 5.0,
                        "n_failed": 0, "pc_success_of": of}}


def _printed(out: str) -> dict[str, tuple[float, float, float]]:
    """Each table row's printed (success %, CI low, CI high)."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[3].startswith("[") and cells[2] != "-":
            rows[cells[0]] = (float(cells[2]), float(cells[3][1:-1]), float(cells[4][:-1]))
    return rows


def _stopped(reason: str, n: int, max_episodes: int, **more: object) -> dict:
    return {"reason": reason, "n_episodes": n, "max_episodes": max_episodes, "saved": max_episodes - n, **more}


def test_a_ci_width_runs_rows_show_the_unbiased_rates_its_overall_is_the_mean_of() -> None:
    """Before: the rows showed each prefix's k/n (96.7 for mid), the overall row the mean of
    the unbiased rates (71.8, not the rows' 72.2), and nothing said why far's exact interval is
    wider than W (issue 47)."""
    rule = {"ci_width": 0.2, "block": 10, "max_episodes": 100}
    tasks = [
        _entry(0, "near", 20, 20, [83.2, 100.0], _stopped("ci_width", 20, 100, pc_success_unbiased=100.0,
                                                           wilson_ci95=[83.9, 100.0])),
        _entry(1, "mid", 29, 30, [81.3, 99.9], _stopped("ci_width", 30, 100, pc_success_unbiased=95.0,
                                                         wilson_ci95=[83.3, 99.4])),
        _entry(2, "far", 12, 60, [11.0, 32.7], _stopped("ci_width", 60, 100, pc_success_unbiased=20.3,
                                                         wilson_ci95=[11.8, 31.8])),
    ]
    out = table(_adaptive_info(tasks, 71.77, [66.3, 77.3], "the mean of 3 tasks' unbiased rates", rule))
    rows = _printed(out)
    assert [rows[t][0] for t in ("near", "mid", "far")] == [100.0, 95.0, 20.3]
    assert rows["overall"][0] == pytest.approx(sum(rows[t][0] for t in ("near", "mid", "far")) / 3, abs=0.05)
    assert all(lo <= point <= hi for point, lo, hi in rows.values())
    assert "ci_width at 60" in out
    notes = " ".join(out.split())
    assert "unbiased" in notes and "overall: the mean of 3 tasks' unbiased rates" in notes
    assert "progress line shows the mean of the tasks' k/n" in notes
    # far met W on its Wilson interval (20.0 wide) and shows the exact one, 21.7 wide: said, and why
    assert "1 of 3 stopped tasks show one wider than --eval.ci_width's 20 points (far 21.7)" in notes
    assert "pays for that stop" in notes


def test_no_printed_point_lies_outside_its_own_interval() -> None:
    """A task a comparison stopped early once printed `50.0 [59.8, 78.0]`, its prefix's k/n
    outside its anytime interval: it shows the interval's midpoint, said so; a task that ran
    every episode keeps its k/n; a point outside its interval (any row) gives way to the midpoint."""
    rule = {"versus": "other", "alpha": 0.05, "margin": 0.05, "block": 10, "max_episodes": 60}
    tasks = [
        _entry(0, "near", 15, 30, [59.8, 78.0], _stopped("worse", 30, 60, wilson_ci95=[33.2, 66.8])),
        _entry(1, "mid", 51, 60, [69.8, 94.8], _stopped("worse", 60, 60, wilson_ci95=[73.9, 91.9])),
        _entry(2, "far", 6, 60, [12.0, 30.0], _stopped("max_episodes", 60, 60, wilson_ci95=[4.7, 20.1])),
    ]
    out = table(_adaptive_info(tasks, 48.3, [41.0, 55.6], "the mean of 3 tasks' rates", rule))
    rows = _printed(out)
    assert rows["near"][0] == pytest.approx((59.8 + 78.0) / 2, abs=0.05)
    assert rows["mid"][0] == 85.0  # every episode ran: its k/n, inside its interval
    assert rows["far"][0] == 21.0  # 10.0 lies outside [12.0, 30.0]: the midpoint
    assert all(lo <= point <= hi for point, lo, hi in rows.values())
    notes = " ".join(out.split())
    assert "the midpoint of its 95% CI" in notes and "k/n of a task that ran every episode" in notes
    assert "(their k/n, not the midpoints above)" in notes and "anytime-valid interval" in notes
    assert "worse at 30" in out and "max_episodes at 60" in out


def test_a_fixed_runs_table_has_no_stop_column_and_no_notes() -> None:
    tasks = [_entry(0, "near", 5, 10, [23.7, 76.3], {})]
    for t in tasks:
        del t["stop"]
    info = _adaptive_info(tasks, 50.0, [23.7, 76.3], "", {})
    del info["adaptive"]
    out = table(info)
    assert out.splitlines()[0].split() == ["task", "episodes", "success", "%", "95%", "CI", "mean", "length", "failed"]
    assert _printed(out)["near"][0] == 50.0 and "success %:" not in out
