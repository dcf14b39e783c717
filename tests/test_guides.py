"""docs/adding_a_policy.md: its example plugin (tests/steer_policy.py) is the page's code and
runs through the real CLI. (docs/adding_a_benchmark.md's example: tests/test_benchmarks.py.)"""

from __future__ import annotations

import re

from conftest import REPO, TESTS, load_info, per_episode, run_subprocess

PLUGIN = {"ROLLBENCH_PLUGINS": "steer_policy"}
STEER = ("eval", "--env.type=fake", "--env.task=near,mid", "--policy.type=steer", "--eval.n_episodes=6")


def test_adding_a_policy_doc_example_is_the_tested_plugin():
    doc = (REPO / "docs" / "adding_a_policy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    example = (TESTS / "steer_policy.py").read_text()
    assert example in blocks, "docs/adding_a_policy.md must show tests/steer_policy.py verbatim"


def test_plugin_policy_selectable_via_env_var(tmp_path):
    """tests/steer_policy.py registers `steer`: listed, its flag in --help, and it reaches every
    target with the same episodes in worker placement, driver placement and lockstep."""
    listed = run_subprocess("list", timeout=120, **PLUGIN)
    assert listed.rc == 0, listed.err
    assert "steer" in listed.out.split("policy types (--policy.type):", 1)[1].split()
    helped = run_subprocess("eval", "--help", timeout=120, **PLUGIN)
    assert helped.rc == 0, helped.err
    section = helped.out.split("--policy.type=steer: Steers to the target", 1)[1].split("\n\n", 1)[0]
    assert "--policy.chunk  (int, default 4)" in section
    assert "actions planned per call" in section

    ways = {
        "worker": ("--workers=1",),  # cheap: auto placement runs it inside the env worker
        "driver": ("--workers=2", "--policy.placement=driver"),
        "lockstep": ("--workers=2", "--eval.mode=lockstep", "--eval.batch_size=4"),
    }
    results = {}
    for name, flags in ways.items():
        out = tmp_path / name
        res = run_subprocess(*STEER, "--policy.chunk=3", *flags, f"--output_dir={out}", timeout=180, **PLUGIN)
        assert res.rc == 0, (name, res.err)
        info = load_info(out)
        assert info["config"]["policy"]["options"] == {"chunk": "3"}
        assert info["overall"]["n_episodes"] == 12
        assert all(s for task in info["per_task"] for s in task["metrics"]["successes"]), name
        results[name] = per_episode(out)
    assert load_info(tmp_path / "worker")["scheduling"]["placement"] == "worker"
    assert load_info(tmp_path / "lockstep")["scheduling"]["mode"] == "lockstep"
    assert results["driver"] == results["worker"]
    assert results["lockstep"] == results["worker"]


def test_plugin_policy_bad_flags_are_one_line_errors(tmp_path):
    cases = [
        ("--policy.chunk=0", "--policy.chunk=0 is not allowed; it must be >= 1"),
        ("--policy.chunk=two", "--policy.chunk='two': expected an integer"),
        ("--policy.chunck=3", "unknown flag --policy.chunck for --policy.type=steer. Did you mean --policy.chunk?"),
    ]
    for flag, message in cases:
        res = run_subprocess(*STEER, flag, f"--output_dir={tmp_path / 'o'}", timeout=60, **PLUGIN)
        assert res.rc == 2, (flag, res.err)
        assert res.err.strip().splitlines() == [res.err.strip()], res.err
        assert message in res.err and "Traceback" not in res.err
    # the constructor refuses a benchmark without the observation it reads, before any output
    res = run_subprocess("eval", "--env.type=gym", "--env.task=CartPole-v1", "--policy.type=steer",
                         f"--output_dir={tmp_path / 'o'}", timeout=60, **PLUGIN)
    assert res.rc == 2, res.err
    assert "--policy.type=steer reads observation.environment_state" in res.err
    assert not (tmp_path / "o").exists()


def test_plugin_policy_unknown_without_the_plugin(tmp_path):
    res = run_subprocess(*STEER, f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2
    assert res.err.strip().splitlines() == [res.err.strip()]
    assert "no policy type named 'steer'" in res.err and "Known: expert" in res.err
    assert not (tmp_path / "o").exists()
