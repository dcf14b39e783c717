"""`rollbench compare A B --sequential`: where the anytime-valid test stops on real runs
(the statistics themselves: tests/test_sequential.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import per_episode, run_subprocess
from rollbench.report.sequential import sequential_tasks

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
                                           (("--sequential", "--margin=2"), "--margin='2'")])
def test_bad_sequential_flags_are_one_line_errors(runs: tuple[Path, Path], flags: tuple[str, ...], needle: str) -> None:
    res = run_subprocess("compare", str(runs[0]), str(runs[1]), *flags)
    assert res.rc == 2 and needle in res.err and "Traceback" not in res.err
