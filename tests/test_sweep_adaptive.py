"""Adaptive sweeps: every (task, condition) stops on its own prefix (--eval.ci_width), or a
condition once its difference from the control is decided (--eval.perturb_stop=paired); the
stops and the episodes that count do not depend on workers, mode, or a kill and a resume,
and eval_info's per_condition is a recomputation of the counted prefixes."""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from conftest import load_info, run_subprocess
from rollbench.report import conditions
from rollbench.report.runs import load_run
from rollbench.results.log import read_records
from rollbench.stopping.adaptive import StopRule, decide
from rollbench.stopping.sequential import sequential_test
from test_resume import start_and_stop

N = 40
BLOCK = 5
COMMON = ("eval", "--env.type=fake", "--policy.type=expert", f"--eval.n_episodes={N}", f"--eval.ci_block={BLOCK}")
WIDTH = (*COMMON, "--eval.perturb=action.noise=0.3,3", "--eval.ci_width=0.3")
PAIRED = (*COMMON, "--eval.perturb=action.noise=3", "--eval.perturb_stop=paired")
WAYS = {
    "one_worker": ("--workers=1",),
    "two_workers": ("--workers=2",),
    "lockstep_in_process": ("--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=7"),
}


def stops(out: Path) -> dict[tuple[str, int], tuple[int, str]]:
    """(condition, task_id) -> (its counted prefix, why it stopped), from per_condition."""
    return {(c["condition"], t["task_id"]): (t["stop"]["n_episodes"], t["stop"]["reason"])
            for c in load_info(out)["per_condition"] for t in c["per_task"]}


def counted(out: Path) -> dict[tuple[str, int, int], tuple[Any, ...]]:
    """The logged episodes inside their (task, condition)'s stop: (condition, task, index) -> outcome."""
    cut = stops(out)
    return {(r.condition, r.task_id, r.episode_index % N): r.outcome() for r in read_records(out)
            if r.ok and r.episode_index % N < cut[(r.condition, r.task_id)][0]}


def run_every_way(cli: Any, tmp_path: Path, args: tuple[str, ...]) -> dict[str, Path]:
    outs = {}
    for name, flags in WAYS.items():
        outs[name] = tmp_path / name
        res = cli(*args, *flags, f"--output_dir={outs[name]}")
        assert res.rc == 0, (name, res.err)
    killed = tmp_path / "killed"
    slow = (*args, "--env.step_sleep_s=0.001", "--workers=1")
    rc, _, logged = start_and_stop(slow, killed, signal.SIGKILL, after_lines=25)
    assert rc == -signal.SIGKILL and logged >= 25
    res = run_subprocess(*slow, f"--output_dir={killed}", timeout=120)
    assert res.rc == 0 and "resuming" in res.err, res.err
    assert len(read_records(killed)) > logged  # killed part-way
    outs["killed_and_resumed"] = killed
    return outs


def check_same_and_recomputed(outs: dict[str, Path]) -> dict[tuple[str, int], tuple[int, str]]:
    first = outs["one_worker"]
    for name, out in outs.items():
        assert stops(out) == stops(first), name
        assert counted(out) == counted(first), name
        info = load_info(out)
        assert info["status"] == "complete" and info["adaptive"]["tasks_running"] == 0, name
    # per_condition (rates, pairs) is a recomputation of the counted prefixes
    episodes = counted(first)
    info = load_info(first)
    for c in info["per_condition"]:
        cid = c["condition"]
        mine = {k[1:]: v[1] for k, v in episodes.items() if k[0] == cid}
        assert (c["n_episodes"], c["n_success"]) == (len(mine), sum(mine.values())), cid
        for t in c["per_task"]:
            of_task = [ok for (task, _), ok in mine.items() if task == t["task_id"]]
            assert (t["n_episodes"], t["n_success"]) == (len(of_task), sum(of_task)) == (t["stop"]["n_episodes"], t["n_success"])
        if cid:
            control = {k[1:]: v[1] for k, v in episodes.items() if k[0] == ""}
            pairs = [(control[k], ok) for k, ok in mine.items() if k in control]
            v = c["vs_control"]
            assert v["n_pairs"] == len(pairs)
            assert v["only_control"] == sum(a and not b for a, b in pairs)
            assert v["only_condition"] == sum(b and not a for a, b in pairs)
    # the report's and `rollbench compare`'s view of each condition: its counted prefix too
    for name, out in outs.items():
        split = conditions.split(load_run(str(out), "run"))
        assert split is not None
        for c in load_info(out)["per_condition"]:
            assert sum(t.n for t in split[c["condition"]].tasks.values()) == c["n_episodes"], (name, c["condition"])
    # the control's LeRobot keys are its counted prefix, with the control's stop per task
    for t in info["per_task"]:
        assert t["stop"]["n_episodes"] == stops(first)[("", t["task_id"])][0] == t["n_episodes"]
    return stops(first)


def by_position(out: Path) -> dict[tuple[str, int], dict[int, bool]]:
    """Every logged episode of a (task, condition), by its index within its condition."""
    got: dict[tuple[str, int], dict[int, bool]] = defaultdict(dict)
    for r in read_records(out):
        got[(r.condition, r.task_id)][r.episode_index % N] = r.success
    return got


def test_ci_width_stops_each_condition_on_its_own_prefix_whatever_runs_it(cli: Any, tmp_path: Path) -> None:
    outs = run_every_way(cli, tmp_path, WIDTH)
    got = check_same_and_recomputed(outs)
    # each (task, condition) stopped where today's rule stops its prefix, and on the episodes
    # a fixed-n sweep runs: the stop rule changes which episodes count, never an episode
    fixed = tmp_path / "fixed"
    assert cli(*WIDTH[:-1], "--workers=2", f"--output_dir={fixed}").rc == 0
    assert "stop" not in load_info(fixed)["per_task"][0] and "adaptive" not in load_info(fixed)
    every = by_position(fixed)
    assert len(every) == 9 and all(len(e) == N for e in every.values())
    rule = StopRule(0.3, BLOCK, N)
    want = {}
    for key, outcomes in every.items():
        stop = decide(rule, outcomes)
        want[key] = (stop.n_episodes, stop.reason)
    assert got == want
    assert any(n < N for n, _ in got.values()) and len({n for n, _ in got.values()}) > 1
    fixed_outcomes = {(r.condition, r.task_id, r.episode_index % N): r.outcome() for r in read_records(fixed)}
    assert all(fixed_outcomes[k] == v for k, v in counted(outs["one_worker"]).items())
    saved = load_info(outs["one_worker"])["adaptive"]
    assert saved["stops_per_task"] == 3 and saved["episodes_saved"] == sum(N - n for n, _ in got.values())


def test_paired_stops_an_obviously_worse_condition_early_and_the_control_with_it(cli: Any, tmp_path: Path) -> None:
    outs = run_every_way(cli, tmp_path, PAIRED)
    got = check_same_and_recomputed(outs)
    worse = {task: n for (cid, task), (n, reason) in got.items() if cid and reason == "worse"}
    assert len(worse) == 3 and all(n < N for n in worse.values())  # action.noise=3 ruins the expert
    for task, n in worse.items():  # the control ran as long as its only condition needed its pairs
        assert got[("", task)] == (n, "conditions_stopped")
    # the decision is the sequential test of the pairs, each (task, condition) at alpha / 3
    every = by_position(outs["one_worker"])
    for task, n in worse.items():
        a = [every[("", task)][i] for i in range(n)]
        b = [every[("action.noise=3", task)][i] for i in range(n)]
        result = sequential_test(a, b, 0.05 / 3, 0.05, BLOCK)
        assert (result.decision, result.n_pairs) == ("worse", n)
    # lockstep's batches of 7 ran a condition's episodes past its stop (not counted, above)
    lockstep = load_info(outs["lockstep_in_process"])["per_condition"][1]["per_task"]
    assert sum(t["stop"]["ran_past_stop"] for t in lockstep) > 0
    info = load_info(outs["one_worker"])
    assert info["adaptive"]["perturb_stop"] == "paired" and info["adaptive"]["level"] == pytest.approx(0.05 / 3)


@pytest.mark.parametrize("flags,words", [
    (("--eval.perturb_stop=paired",), "--eval.perturb_stop=paired stops a sweep's conditions; it needs --eval.perturb"),
    (("--eval.perturb=action.noise=1", "--eval.perturb_stop=pair"), "--eval.perturb_stop='pair' is not allowed; use paired or none"),
    (("--eval.perturb=action.noise=1", "--eval.perturb_stop=paired", "--eval.ci_width=0.2"), "two stop rules"),
    (("--eval.perturb=action.noise=1", "--eval.versus=/tmp/x"), "--eval.perturb_stop=paired compares each condition"),
])
def test_bad_adaptive_sweeps_are_one_line(cli, tmp_path: Path, flags: tuple[str, ...], words: str) -> None:
    res = cli("eval", "--env.type=fake", "--policy.type=expert", *flags, f"--output_dir={tmp_path / 'o'}")
    assert res.rc == 2, res.err
    assert words in res.err and len(res.err.strip().splitlines()) == 1, res.err
    assert not (tmp_path / "o").exists()
