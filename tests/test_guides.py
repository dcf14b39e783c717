"""docs/adding_a_policy.md and docs/adding_an_executor.md: each page's example plugin
(tests/steer_policy.py, tests/serial_executor.py) is the page's code and runs through the real
CLI. docs/adding_a_benchmark.md lists every member of BenchmarkConfig (checked here; its
example: tests/test_benchmarks.py)."""

from __future__ import annotations

import dataclasses
import inspect
import re

from conftest import REPO, TESTS, load_info, per_episode, run_subprocess
from rollbench.config.env import BenchmarkConfig

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


EXECUTOR = {"ROLLBENCH_PLUGINS": "serial_executor"}
NOISY = ("eval", "--env.type=fake", "--env.task=near,mid,far", "--policy.type=random", "--eval.n_episodes=5",
         "--env.max_steps=12")


def test_adding_an_executor_doc_example_is_the_tested_plugin():
    doc = (REPO / "docs" / "adding_an_executor.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert (TESTS / "serial_executor.py").read_text() in blocks, "docs/adding_an_executor.md must show tests/serial_executor.py verbatim"


def test_an_executor_plugin_gives_the_episodes_of_the_local_executor(tmp_path):
    """`--executor=serial` (tests/serial_executor.py): listed, and the same episodes as the
    local executor's continuous and lockstep runs, with its facts in eval_info.json."""
    listed = run_subprocess("list", timeout=120, **EXECUTOR)
    assert listed.rc == 0, listed.err
    assert listed.out.split("executors (--executor):", 1)[1].split("\n\n")[0].split() == ["local", "ray", "serial", "shards"]
    results = {}
    for name, flags in {"serial": ("--executor=serial",), "local": ("--workers=2",),
                        "lockstep": ("--eval.mode=lockstep", "--eval.batch_size=4"),
                        "fresh": ("--executor=serial", "--executor.fresh_env=true")}.items():
        out = tmp_path / name
        res = run_subprocess(*NOISY, *flags, f"--output_dir={out}", timeout=180, **EXECUTOR)
        assert res.rc == 0, (name, res.err)
        results[name] = per_episode(out)
    assert len(results["serial"]) == 15
    assert len({r[1] for r in results["serial"].values()}) > 10, "a test that cannot tell episodes apart"
    assert results["serial"] == results["local"] == results["lockstep"] == results["fresh"]
    assert load_info(tmp_path / "fresh")["config"]["executor_options"] == {"fresh_env": "true"}
    info = load_info(tmp_path / "serial")
    assert info["mode"] is None and info["scheduling"] is None and info["executor"] == {"name": "serial"}
    assert info["policy_calls"]["rows_per_call"] == 1.0
    assert info["command"][info["command"].index("--executor=serial")]
    # what `--executor=serial` wrote resumes: a second run finds every episode done
    again = run_subprocess(*NOISY, "--executor=serial", f"--output_dir={tmp_path / 'serial'}", timeout=180, **EXECUTOR)
    assert again.rc == 0, again.err
    assert "0 episodes run (serial)" in again.out


def test_executor_refusals_are_one_line_errors(tmp_path):
    cases = [
        ({}, "--executor=serial", "--executor=serial: no executor named 'serial'. Known: local, ray, shards."),
        (EXECUTOR, "--executor=seriall", "Did you mean 'serial'?"),
        (EXECUTOR, "--executor.fresh_envs=true", "--executor.fresh_envs: --executor=local takes no --executor.* flags"),
    ]
    for env, flag, message in cases:
        res = run_subprocess(*NOISY, flag, f"--output_dir={tmp_path / 'o'}", timeout=60, **env)
        assert res.rc == 2, (flag, res.err)
        assert res.err.strip().splitlines() == [res.err.strip()], res.err
        assert message in res.err and "Traceback" not in res.err
    res = run_subprocess(*NOISY, "--executor=serial", "--executor.fresh_envs=true", f"--output_dir={tmp_path / 'o'}",
                         timeout=60, **EXECUTOR)
    assert res.rc == 2 and "unknown flag --executor.fresh_envs. Did you mean --executor.fresh_env?" in res.err, res.err
    res = run_subprocess(*NOISY, "--executor=serial", "--eval.num_shards=2", "--launch=local",
                         f"--output_dir={tmp_path / 'o'}", timeout=60, **EXECUTOR)
    assert res.rc == 2 and "--executor=serial with --launch=local is not allowed" in res.err, res.err
    assert "--launch=local is now --executor=shards" in res.err
    assert not (tmp_path / "o").exists()


def test_a_policy_plugin_that_breaks_the_protocol_is_refused_in_one_line(tmp_path):
    plugins = {"ROLLBENCH_PLUGINS": "bad_policy_plugins"}
    cases = [
        ("--policy.type=duck", "--policy.type=duck built a bad_policy_plugins.DuckPolicy, which is not a rollbench Policy: "
                               "subclass rollbench.policies.base.Policy"),
        ("--policy.type=clash", "--policy.type=clash: its options (ClashOptions) declare device, a flag every policy "
                                "type takes (--policy.device)"),
    ]
    for flag, message in cases:
        res = run_subprocess("eval", "--env.type=fake", flag, f"--output_dir={tmp_path / 'o'}", timeout=60, **plugins)
        assert res.rc == 2, (flag, res.err)
        assert res.err.strip().splitlines() == [res.err.strip()], res.err
        assert message in res.err and "Traceback" not in res.err
        assert not (tmp_path / "o").exists()


def test_eval_help_says_which_flags_a_lerobot_checkpoint_takes():
    res = run_subprocess("eval", "--help", timeout=60)
    section = res.out.split("--policy.type=lerobot:", 1)[1].split("\n\n", 1)[0]
    assert "--policy.<field>" in section and "any field of the checkpoint's config (config.json)" in section


def test_adding_a_benchmark_lists_every_member_of_benchmark_config():
    """Every public member of BenchmarkConfig (field, class variable, property, method) has one
    row in the tables of docs/adding_a_benchmark.md, no row names something it lacks, and the
    "Required" table holds exactly the methods the base class leaves unimplemented."""
    doc = (REPO / "docs" / "adding_a_benchmark.md").read_text()
    section = doc.split("## What the class defines", 1)[1].split("\n## ", 1)[0]
    tables = {title: re.findall(r"^\| `(\w+)", body, flags=re.M)
              for title, body in re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", section, flags=re.M | re.S)}
    rows = [name for names in tables.values() for name in names]
    listed = set(rows)
    assert len(rows) == len(listed), f"listed twice: {sorted(n for n in listed if rows.count(n) > 1)}"
    members = {name for name in vars(BenchmarkConfig) if not name.startswith("_")}
    members |= {f.name for f in dataclasses.fields(BenchmarkConfig)}
    assert not members - listed, f"BenchmarkConfig members missing from the guide: {sorted(members - listed)}"
    assert listed - members <= {"__post_init__"}, f"not members of BenchmarkConfig: {sorted(listed - members)}"
    unimplemented = {name for name in members if inspect.isfunction(value := vars(BenchmarkConfig)[name])
                     and "raise NotImplementedError" in inspect.getsource(value)}
    assert set(tables["Required"]) == unimplemented
