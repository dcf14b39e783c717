"""`rollbench compare A B --sequential`: where the anytime-valid test stops on real runs
(the statistics themselves: tests/test_sequential.py)."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO, CliResult, load_info, per_episode, run_subprocess, subprocess_env
from rollbench.cli import adaptive_line
from rollbench.plan import make_plan
from rollbench.results import store
from rollbench.results.log import EPISODES_DIR
from rollbench.results.merge import merge
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import MANIFEST
from rollbench.stats import wilson
from rollbench.stopping import estimates as stopped
from rollbench.stopping.adaptive import Stops, apply, stop_json
from rollbench.stopping.paired import PairedRule
from rollbench.stopping.sequential import fixed_budget_test, sequential_tasks
from rollbench.stopping.versus import paired_decision

BASE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=40", "--eval.report=false")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The expert (A) and the expert with heavy action noise (B) on the same seeds."""
    root = tmp_path_factory.mktemp("runs")
    for name, noise in (("a", "0"), ("b", "3.0")):
        res = run_subprocess(*BASE, f"--policy.action_noise={noise}", f"--output_dir={root / name}")
        assert res.rc == 0, res.err
    return root / "a", root / "b"


def test_the_sequential_verdict_is_the_tests_on_the_paired_episodes(runs: tuple[Path, Path]) -> None:
    a, b = runs
    res = run_subprocess("compare", str(a), str(b), "--sequential")
    assert res.rc == 0, res.err
    ea, eb = per_episode(a), per_episode(b)
    names = {0: "near", 1: "mid", 2: "far"}
    pairs = {names[t]: ([ea[("all", t, i)][0] for i in range(40)], [eb[("all", t, i)][0] for i in range(40)])
             for t in range(3)}
    want = sequential_tasks(pairs, 0.05, 0.05, 10)
    lines = {line.split()[0]: line for line in res.out.splitlines() if re.match(r"^(near|mid|far|pooled)\s+\d+ of", line)}
    for name, r in want.tasks.items():
        used = r.stopped_at if r.stopped_at is not None else 40
        assert lines[name].split()[1:4] == [str(used), "of", "40"]
        assert lines[name].split()[-1] == r.decision
    assert want.tasks["near"].decision == "worse" and want.tasks["near"].stopped_at < 40  # the point: it stops early
    assert lines["pooled"].split()[-1] == want.pooled.decision == "worse"
    used = sum(r.stopped_at or 40 for r in want.tasks.values())
    assert f"uses {used} of 120 pairs per run" in res.out


def test_the_fixed_budget_design_is_the_group_sequential_test_on_the_paired_episodes(runs: tuple[Path, Path]) -> None:
    a, b = runs
    res = run_subprocess("compare", str(a), str(b), "--sequential", "--design=fixed")
    assert res.rc == 0, res.err
    ea, eb = per_episode(a), per_episode(b)
    names = {0: "near", 1: "mid", 2: "far"}
    pairs = {
        names[t]: ([ea[("all", t, i)][0] for i in range(40)], [eb[("all", t, i)][0] for i in range(40)])
        for t in range(3)
    }
    want = sequential_tasks(pairs, 0.05, 0.05, 10, "fixed")
    assert "fixed budget" in res.out and "[repeated CI]" in res.out
    lines = {
        line.split()[0]: line for line in res.out.splitlines() if re.match(r"^(near|mid|far|pooled)\s+\d+ of", line)
    }
    for name, r in want.tasks.items():
        assert r == fixed_budget_test(*pairs[name], 40, 0.05 / 3, 10)
        used = r.stopped_at if r.stopped_at is not None else 40
        assert lines[name].split()[1:4] == [str(used), "of", "40"] and lines[name].split()[-1] == r.decision
        lo, hi = r.interval
        assert f"[{100 * lo:+.1f}, {100 * hi:+.1f}]" in lines[name]


def test_a_run_without_seeds_needs_the_seed_it_ran_with(runs: tuple[Path, Path], tmp_path: Path) -> None:
    info = json.loads((runs[0] / "eval_info.json").read_text())
    for task in info["per_task"]:  # as lerobot-eval writes it: no seeds
        task["metrics"].pop("seeds")
        task["metrics"].pop("episode_ix")
    lerobot = tmp_path / "eval_info.json"
    lerobot.write_text(json.dumps({"per_task": info["per_task"], "overall": info["overall"]}))
    res = run_subprocess("compare", str(lerobot), str(runs[1]), "--sequential")
    assert res.rc == 2 and "--seed_a=S" in res.err and "Traceback" not in res.err
    res = run_subprocess("compare", str(lerobot), str(runs[1]), "--sequential", "--seed_a=1000")
    assert res.rc == 0, res.err


@pytest.mark.parametrize("flags, needle", [(("--margin=0.1",), "add --sequential"), (("--sequential", "--block=0"), "--block='0'"),
                                           (("--sequential", "--margin=2"), "--margin='2'"),
                                           (("--design=fixed",), "add --sequential"),
                                           (("--sequential", "--design=bayes"), "--design='bayes'"),
                                           (("--sequential", "--design=fixed", "--margin=0.1"), "decides better or worse only")])
def test_bad_sequential_flags_are_one_line_errors(runs: tuple[Path, Path], flags: tuple[str, ...], needle: str) -> None:
    res = run_subprocess("compare", str(runs[0]), str(runs[1]), *flags)
    assert res.rc == 2 and needle in res.err and "Traceback" not in res.err


# -- --eval.versus: runs that stop at the decision ------------------------------------------------

VERSUS = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=60", "--eval.report=false")


def _prefix(episodes: dict, stops: dict[int, int]) -> dict:
    return {k: v for k, v in episodes.items() if k[2] < stops[k[1]]}


def _decided_stops(a: Path, b: Path) -> dict[int, int]:
    """Where the sequential test stops each task on the two fixed runs' paired episodes."""
    ea, eb = per_episode(a), per_episode(b)
    stops = {}
    for t in range(3):
        r = sequential_tasks({str(u): ([ea[("all", u, i)][0] for i in range(60)], [eb[("all", u, i)][0] for i in range(60)])
                              for u in range(3)}).tasks[str(t)]
        stops[t] = r.stopped_at if r.stopped_at is not None else 60
    return stops


@pytest.fixture(scope="module")
def fixed60(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[int, int]]:
    root = tmp_path_factory.mktemp("fixed60")
    for name, noise in (("a", "0"), ("b", "3.0")):
        res = run_subprocess(*VERSUS, f"--policy.action_noise={noise}", f"--output_dir={root / name}")
        assert res.rc == 0, res.err
    stops = _decided_stops(root / "a", root / "b")
    assert all(k < 60 for k in stops.values())
    return root / "a", root / "b", stops


def test_a_run_against_a_finished_baseline_stops_at_the_decision(fixed60, tmp_path: Path) -> None:
    a, b_fixed, stops = fixed60
    res = run_subprocess(*VERSUS, "--policy.action_noise=3.0", f"--eval.versus={a}", "--workers=2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "this run is 3 worse" in res.out
    assert per_episode(tmp_path) == _prefix(per_episode(b_fixed), stops)
    info = json.loads((tmp_path / "eval_info.json").read_text())
    for task in info["per_task"]:
        assert task["stop"]["reason"] == "worse" and task["stop"]["n_episodes"] == stops[task["task_id"]]
        assert task["stop"]["versus"]["e_value"] >= 1 / (0.05 / 3)
        # the rate's interval holds under the comparison's stop: the anytime-valid one of its
        # episodes in order (the fixed-n Wilson one kept beside it)
        successes = [s for _, s in sorted(zip(task["metrics"]["episode_ix"], task["metrics"]["successes"], strict=True))]
        lo, hi = stopped.anytime_interval(successes)
        assert task["pc_success_ci95"] == task["summary"]["pc_success_ci95"] == [100 * lo, 100 * hi]
        assert task["stop"]["wilson_ci95"] == [100 * x for x in wilson(task["n_success"], task["n_episodes"])]
    rates = [t["n_success"] / t["n_episodes"] for t in info["per_task"]]
    assert info["overall"]["pc_success"] == pytest.approx(100 * sum(rates) / len(rates))  # each task weighs the same
    res = run_subprocess("report", str(tmp_path))
    assert res.rc == 0, res.err
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Sequential comparison</h2>" in page and page.count("<td>worse</td>") == 3


def test_the_fixed_budget_design_stops_a_run_at_the_group_sequential_decision(fixed60, tmp_path: Path) -> None:
    """--eval.versus_design=fixed: each task stops where the exact group-sequential test, with
    --eval.n_episodes as its budget, decides on the paired episodes (no e-value: null)."""
    a, b_fixed, _ = fixed60
    ea, eb = per_episode(a), per_episode(b_fixed)
    stops = {}
    for t in range(3):
        r = fixed_budget_test([ea[("all", t, i)][0] for i in range(60)], [eb[("all", t, i)][0] for i in range(60)],
                              60, 0.05 / 3, 10)
        assert r.decision == "worse"
        stops[t] = r.n_pairs
    res = run_subprocess(*VERSUS, "--policy.action_noise=3.0", f"--eval.versus={a}", "--eval.versus_design=fixed",
                         f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "--eval.versus, the fixed-budget design" in res.out and "this run is 3 worse" in res.out
    assert per_episode(tmp_path) == _prefix(eb, stops)
    info = load_info(tmp_path)
    assert info["adaptive"]["design"] == "fixed"
    for task in info["per_task"]:
        v = task["stop"]["versus"]
        assert task["stop"]["reason"] == "worse" and v["e_value"] is None and v["interval"][1] < 0
    assert run_subprocess("report", str(tmp_path)).rc == 0
    page = (tmp_path / "report.html").read_text()
    assert "exact group-sequential test with a budget of 60 episodes" in page and page.count("<td>worse</td>") == 3
    res = run_subprocess(*VERSUS, "--eval.versus_design=maybe", f"--eval.versus={a}", f"--output_dir={tmp_path / 'x'}")
    assert res.rc == 2 and "--eval.versus_design='maybe' is not allowed; use anytime or fixed" in res.err


def race(tmp_path: Path, run_a: Callable[..., Any], *a_flags: str, sleep: str = "0.002") -> tuple[Any, Any]:
    """B (the noisy expert, one worker) and A (the expert, `a_flags`, run by `run_a`) started
    together, each `--eval.versus=` the other; their CliResults (A's, B's)."""
    (tmp_path / "a").mkdir()  # each names the other's directory, which must exist (stopping/versus.py: precheck)
    (tmp_path / "b").mkdir()
    b_args = (*VERSUS, f"--env.step_sleep_s={sleep}", "--eval.max_episodes_rendered=0", "--workers=1",
              "--policy.action_noise=3.0", f"--eval.versus={tmp_path / 'a'}", f"--output_dir={tmp_path / 'b'}")
    proc = subprocess.Popen([sys.executable, "-m", "rollbench", *b_args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO)
    try:
        a = run_a(*VERSUS, f"--env.step_sleep_s={sleep}", "--eval.max_episodes_rendered=0", *a_flags,
                  f"--eval.versus={tmp_path / 'b'}", f"--output_dir={tmp_path / 'a'}")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return a, CliResult(proc.returncode, out, err)


def test_two_runs_started_together_against_each_other_stop_at_the_same_decision(fixed60, tmp_path: Path) -> None:
    a_fixed, b_fixed, stops = fixed60
    a, b = race(tmp_path, run_subprocess, "--workers=1", "--policy.action_noise=0")
    assert a.rc == 0, a.err
    assert b.rc == 0, b.err
    assert "this run is 3 better" in a.out and "this run is 3 worse" in b.out
    assert per_episode(tmp_path / "a") == _prefix(per_episode(a_fixed), stops)
    assert per_episode(tmp_path / "b") == _prefix(per_episode(b_fixed), stops)


def check_paced(tmp_path: Path, a: Any, b: Any, fixed60: tuple[Path, Path, dict[int, int]], in_flight: int) -> None:
    """A, faster than B, waited for B: every task decided at the fixed runs' decision, and
    at most one block (10) plus what A had in flight ran past it (unpaced, A ran every task to
    60 and left one undecided, with 40 episodes past each stop)."""
    a_fixed, b_fixed, stops = fixed60
    assert a.rc == 0, a.err
    assert b.rc == 0, b.err
    assert "this run is 3 better" in a.out and "this run is 3 worse" in b.out
    assert per_episode(tmp_path / "a") == _prefix(per_episode(a_fixed), stops)
    assert per_episode(tmp_path / "b") == _prefix(per_episode(b_fixed), stops)
    for task in load_info(tmp_path / "a")["per_task"]:
        assert task["stop"]["reason"] == "better"
        assert task["stop"]["ran_past_stop"] <= 10 + in_flight, task["stop"]


@pytest.mark.parametrize("flags, in_flight", [
    (("--eval.mode=continuous", "--workers=2"), 4),  # 2 workers x 1 slot, one unit prefetched each
    (("--eval.mode=continuous", "--workers=2", "--policy.placement=driver"), 4),
    (("--eval.mode=lockstep",), 0),
    (("--eval.mode=lockstep", "--eval.isolation=none"), 0),
])
def test_the_faster_of_two_runs_against_each_other_waits_for_the_decision(fixed60, tmp_path: Path, flags, in_flight) -> None:
    # B fails most episodes (20 steps each, 5 ms a step) on one worker: A is faster
    a, b = race(tmp_path, run_subprocess, *flags, sleep="0.005")
    check_paced(tmp_path, a, b, fixed60, in_flight)


def test_a_run_is_paced_only_against_one_that_still_writes(tmp_path: Path) -> None:
    """`store.is_running`: a writer of this machine by its process, one of another machine (or
    a reused pid) by its log's age, a run that has no log yet by its run.json's age."""
    out = tmp_path / "run"
    (out / EPISODES_DIR).mkdir(parents=True)
    assert not store.is_running(out)  # nothing there
    (out / MANIFEST).write_text("{}")
    assert store.is_running(out)  # starting: its policy loads
    old = time.time() - store.STARTING_S - 1
    os.utime(out / MANIFEST, (old, old))
    assert not store.is_running(out)  # it never opened its log
    host = socket.gethostname().split(".")[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    log = out / EPISODES_DIR / f"shard0of1-{host}-{dead.stdout.strip()}.jsonl"
    log.write_text("")
    assert not store.is_running(out)  # its writer is gone (killed, or finished)
    mine = out / EPISODES_DIR / f"shard0of1-{host}-{os.getpid()}.jsonl"
    mine.write_text("")
    assert store.is_running(out)
    stale = time.time() - store.QUIET_S - 1
    os.utime(mine, (stale, stale))
    assert not store.is_running(out)  # alive, but silent too long (a reused pid)
    (out / EPISODES_DIR / "shard1of2-another-host-1.jsonl").write_text("")
    assert store.is_running(out)  # another machine's writer: its log is fresh


@pytest.mark.parametrize("flags, needle", [
    (("--env.task=near",), "ran with another benchmark"),
    (("--seed=7",), "ran with another seed"),
    (("--policy.action_noise=0",), "ran the same policy"),
    (("--policy.action_noise=3", "--eval.ci_width=0.2"), "give one of them"),
])
def test_a_comparison_that_cannot_pair_is_refused_in_one_line(fixed60, tmp_path: Path, flags, needle) -> None:
    res = run_subprocess(*VERSUS, *flags, f"--eval.versus={fixed60[0]}", f"--output_dir={tmp_path / 'out'}")
    assert res.rc == 2, res.err
    assert needle in res.err and "Traceback" not in res.err
    assert not (tmp_path / "out").exists()  # nothing written


# -- a decision at the last look (issue 47) ------------------------------------------------------


def _decided_at_the_budget(design: str) -> tuple[dict[int, bool | None], dict[int, bool | None]]:
    """A: every episode of 20 succeeds; B loses early pairs in each block, too few for the look
    at 10 pairs to decide (level 0.05, a look every 10) and enough for the look at 20, the budget."""
    first, second = {"anytime": (5, 2), "fixed": (3, 3)}[design]
    a: dict[int, bool | None] = {i: True for i in range(20)}
    b: dict[int, bool | None] = {i: (i >= first) if i < 10 else (i - 10 >= second) for i in range(20)}
    return a, b


@pytest.mark.parametrize("design", ["anytime", "fixed"])
def test_a_decision_at_the_last_look_is_reported_as_that_decision(design: str) -> None:
    """Before issue 47 a decision reached at the budget became reason "max_episodes" while
    `stop.versus` said "worse" (and the closing line counted one task fewer)."""

    a, b = _decided_at_the_budget(design)
    for n in (10, 19):  # the look at 10 decides nothing; a look at 20 needs all 20
        early = paired_decision(a, {i: b[i] for i in range(n)}, 20, 20, 10, 0.05, 0.05, design)  # type: ignore[arg-type]
        assert (early.n_episodes, early.reason) == (None, "running")
    stop = paired_decision(a, b, 20, 20, 10, 0.05, 0.05, design)  # type: ignore[arg-type]
    assert stop.details is not None and stop.details["versus"]["decision"] == "worse"
    assert (stop.n_episodes, stop.reason, stop.looked_at) == (20, "worse", 20)  # it stops where no decision would
    mirror = paired_decision(b, a, 20, 20, 10, 0.05, 0.05, design)  # type: ignore[arg-type]
    assert (mirror.n_episodes, mirror.reason) == (20, "better")
    # the closing line counts what eval_info's stop.reason and stop.versus say
    rule = PairedRule(("",), 1, 0.05, 0.05, 10, 20)
    entry = {"stop": stop_json(rule, stop, 0)}
    assert entry["stop"]["reason"] == entry["stop"]["versus"]["decision"] == "worse" and entry["stop"]["saved"] == 0
    line = adaptive_line({"versus": "A", "block": 10, "alpha": 0.05, "max_episodes": 20, "episodes_saved": 0,
                          "tasks_running": 0, "episodes_ran_past_stop": 0}, 1, [entry])
    assert "this run is 1 worse" in line


@pytest.mark.parametrize("design", ["anytime", "fixed"])
def test_a_sweeps_condition_decided_at_the_last_look_is_that_decision(design: str) -> None:
    """--eval.perturb_stop=paired uses the same function: the condition says "worse" at the
    budget; its control ran every episode ("max_episodes": no condition stopped it early)."""
    a, b = _decided_at_the_budget(design)
    rule = PairedRule(("", "noise"), 1, 0.05, 0.05, 10, 20, design=design)  # type: ignore[arg-type]
    outcomes = {("g", 0, ""): a, ("g", 0, "noise"): b}
    got = rule.decide(("g", 0, "noise"), outcomes)
    assert (got.n_episodes, got.reason) == (20, "worse")
    control = rule.decide(("g", 0, ""), outcomes)
    assert (control.n_episodes, control.reason) == (20, "max_episodes")


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 12), st.sampled_from(["anytime", "fixed"]))
def test_a_complete_prefix_stops_with_the_tests_decision(data: st.DataObject, block: int, design: str) -> None:
    """Once every pair up to the budget is in, `stop.reason` is the test's decision whenever the
    test decided (at any look, the last included), and "max_episodes" only when it did not."""
    n = data.draw(st.integers(1, 40))
    # A mostly succeeds and B mostly fails, so that many draws decide, some at the last look
    a = dict(enumerate(data.draw(st.lists(st.sampled_from([True] * 6 + [False, None]), min_size=n, max_size=n))))
    b = dict(enumerate(data.draw(st.lists(st.sampled_from([False, False, True, None]), min_size=n, max_size=n))))
    stop = paired_decision(a, b, n, n, block, 0.05, 0.05, design)  # type: ignore[arg-type]
    assert stop.details is not None
    decision = stop.details["versus"]["decision"]
    assert stop.reason == (decision if decision != "undecided" else "max_episodes")
    assert stop.n_episodes is not None and stop.n_episodes <= n
    if stop.reason == "max_episodes":
        assert stop.n_episodes == n


@settings(max_examples=40, deadline=None)
@given(st.data(), st.randoms(use_true_random=False))
def test_paired_stops_do_not_depend_on_the_order_records_arrive_in(data: st.DataObject, rnd: random.Random) -> None:
    """A sweep's paired stop, a decision at the last look included, is the same whatever order
    its episodes finish in: live (`Stops`) and at the close (`apply`)."""
    n = data.draw(st.integers(10, 30))
    control = data.draw(st.lists(st.sampled_from([True] * 6 + [False, None]), min_size=n, max_size=n))
    noisy = data.draw(st.lists(st.sampled_from([False, False, True, None]), min_size=n, max_size=n))
    rule = PairedRule(("", "noise"), 1, 0.05, 0.05, 10, n)
    plan = make_plan({"g": ["t"]}, n, 0, conditions=("", "noise"))
    records = [EpisodeRecord.from_unit(u, success=bool(o), sum_reward=0.0, max_reward=0.0, n_steps=1,
                                       status="ok" if o is not None else "failed")
               for u, o in zip(plan, [*control, *noisy], strict=True)]
    want = {key: rule.decide(key, {("g", 0, ""): dict(enumerate(control)), ("g", 0, "noise"): dict(enumerate(noisy))})
            for key in (("g", 0, ""), ("g", 0, "noise"))}
    rnd.shuffle(records)
    stops = Stops(rule)
    for rec in records:
        stops.observe(rec)
    assert stops.cutoffs == {key: stop.n_episodes for key, stop in want.items()}
    assert apply(rule, merge(records, plan)).stops == want
