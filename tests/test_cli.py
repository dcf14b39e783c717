"""The real `rollbench` command: help, list, exit codes and one-line errors for bad input."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import CliResult, load_info, run_subprocess
from rollbench import __version__
from rollbench.config.codec import config_from_flags
from rollbench.config.env import BENCHMARKS
from rollbench.config.eval import EvalConfig
from rollbench.config.policy import PolicyConfig
from rollbench.config.ray import RayConfig
from rollbench.config.run import RunConfig
from rollbench.config.tune import TuneConfig
from rollbench.policies.base import POLICIES

FAKE = ("eval", "--env.type=fake", "--eval.mode=lockstep")


def assert_one_line_error(res: CliResult, *needles: str, rc: int = 2) -> str:
    """stderr is exactly one `rollbench: error:` line holding every needle; no traceback."""
    assert res.rc == rc, (res.rc, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{res.err}"
    line = lines[0]
    assert line.startswith("rollbench: error: "), line
    assert "Traceback" not in res.err
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def run_error_line(res: CliResult) -> str:
    """The single error line of a run that failed after it started (progress lines may precede it)."""
    assert "Traceback" not in res.err, res.err
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench:")]
    assert len(errors) == 1, res.err
    return errors[0]


# -- version, help, list ------------------------------------------------------------


def test_version(cli):
    res = cli("--version")
    assert res.rc == 0
    assert res.out.strip() == f"rollbench {__version__}"


def test_version_subprocess():
    res = run_subprocess("--version", timeout=60)
    assert res.rc == 0, res.err
    assert res.out.strip() == f"rollbench {__version__}"


def test_no_command_prints_usage_and_exits_2(cli):
    res = cli()
    assert res.rc == 2
    assert "usage: rollbench COMMAND" in res.out
    for command in ("eval", "tune", "merge", "list"):
        assert command in res.out


def test_unknown_command_suggests(cli):
    assert_one_line_error(cli("evl"), "'evl'", "Did you mean 'eval'?")


def _init_fields(cls: type, skip: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in skip]


def test_eval_help_documents_every_flag(cli):
    res = cli("eval", "--help")
    assert res.rc == 0
    text = res.out
    for name in _init_fields(EvalConfig):
        assert f"--eval.{name}  (" in text, name
    for name in _init_fields(RunConfig, {"env", "policy", "eval", "tune", "ray", "executor_options"}):
        assert f"--{name}  (" in text, name
    assert "--executor.FIELD  (a plugin executor's own flags" in text  # executor_options: the executor's own
    for name in _init_fields(TuneConfig):
        assert f"--tune.{name}  (" in text, name
    for name in _init_fields(RayConfig):
        assert f"--ray.{name}  (" in text, name
    for name in _init_fields(PolicyConfig, {"options"}):
        assert f"--policy.{name}  (" in text, name
    for policy in POLICIES.names():
        assert policy in text
        own = getattr(POLICIES.get(policy), "options_class", None)
        if own is not None:  # a policy type's own flags, under its own heading
            section = text.split(f"--policy.type={policy}:", 1)[1].split("\n\n", 1)[0]
            for name in _init_fields(own):
                assert f"--policy.{name}  (" in section, (policy, name)
    assert "--policy.type=expert:" in text and "--policy.type=remote:" in text
    # every benchmark's own fields, under its own heading
    for bench in ("fake", "gym", "metaworld", "pusht"):
        section = text.split(f"--env.type={bench}:", 1)[1].split("--env.type=", 1)[0]
        for name in _init_fields(BENCHMARKS.get(bench)):
            assert f"--env.{name}  (" in section, (bench, name)


def test_eval_help_documents_every_flag_with_its_help_text(cli):
    text = cli("eval", "--help").out
    squashed = " ".join(text.split())
    for cls in (EvalConfig, RunConfig, PolicyConfig, RayConfig):
        for f in dataclasses.fields(cls):
            help_text = f.metadata.get("help")
            if help_text and f.name not in ("options", "type", "executor_options"):
                assert " ".join(help_text.split()) in squashed, (cls.__name__, f.name)


@pytest.mark.parametrize("command, needle", [("merge", "usage: rollbench merge DIR"), ("list", "usage: rollbench list")])
def test_subcommand_help(cli, command, needle):
    res = cli(command, "--help")
    assert res.rc == 0
    assert needle in res.out


def test_list_shows_metaworld_tasks_groups_and_policy_types(cli):
    from rollbench.benchmarks.metaworld import all_tasks

    res = cli("list")
    assert res.rc == 0, res.err
    out = res.out
    mw = out.split("  metaworld:", 1)[1].split("\n  pusht:", 1)[0]
    for group, size in (("mt10", 10), ("mt50", 50), ("easy", 28), ("medium", 11), ("hard", 6), ("very_hard", 5)):
        assert f"    {group} ({size}): " in mw, group
    assert "    mt50 (50): assembly-v3, basketball-v3, bin-picking-v3, ... (+47 more)" in mw
    policies = out.split("policy types (--policy.type):", 1)[1].split("\n\n", 1)[0].split()
    assert policies == POLICIES.names()
    for bench in ("fake", "gym", "pusht"):
        assert f"  {bench}: " in out
    # every task, one a line, under its group
    res = cli("list", "metaworld")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    assert lines[0].startswith("metaworld: ")
    mt50 = lines[lines.index("  mt50 (50):") + 1:][:50]
    assert [ln.strip() for ln in mt50] == all_tasks()
    assert all(ln.startswith("    ") for ln in mt50)


def _lines_ok(text: str) -> None:
    assert "[info]" not in text, text
    too_long = [ln for ln in text.splitlines() if len(ln) > 200]
    assert not too_long, too_long


def test_list_lines_are_short_and_third_party_prints_are_silenced(cli):
    res = cli("list")
    assert res.rc == 0, res.err
    _lines_ok(res.out)
    _lines_ok(res.err)
    assert res.err == ""
    assert "    all (3): near, mid, far" in res.out


def test_list_in_a_real_process_prints_only_rollbench_lines():
    import subprocess
    import sys

    from conftest import REPO, subprocess_env

    # stdin closed: hf-libero's first import may ask a question on stdin
    proc = subprocess.run([sys.executable, "-m", "rollbench", "list"], capture_output=True, text=True, timeout=300,
                          env=subprocess_env(), cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    _lines_ok(proc.stdout)
    _lines_ok(proc.stderr)
    assert proc.stdout.startswith("benchmarks (--env.type):\n")


def test_list_benchmark_prints_every_task_one_a_line(cli):
    from rollbench.benchmarks.fake import FakeConfig

    res = cli("list", "fake")
    assert res.rc == 0, res.err
    assert res.err == ""
    lines = res.out.splitlines()
    assert lines[0].startswith("fake: ")
    groups = FakeConfig().list_groups()
    assert [ln for ln in lines[1:] if not ln.startswith("    ")] == [f"  {g} ({len(t)}):" for g, t in groups.items()]
    assert [ln.strip() for ln in lines[1:] if ln.startswith("    ")] == [t for tasks in groups.values() for t in tasks]
    assert "policy types" not in res.out


def test_list_unknown_benchmark_is_one_line_naming_it_and_the_choices(cli):
    line = assert_one_line_error(cli("list", "libro"), "'libro'", "Did you mean 'libero'?")
    for name in BENCHMARKS.names():
        assert name in line
    assert_one_line_error(cli("list", "nosuchbench"), "'nosuchbench'", "fake", "metaworld")


def test_list_takes_at_most_one_benchmark_and_no_flags(cli):
    assert_one_line_error(cli("list", "fake", "metaworld"), "at most one benchmark", "fake metaworld")
    assert_one_line_error(cli("list", "--foo=1"), "--foo", "rollbench list [BENCHMARK]")


def test_list_help_documents_the_benchmark_argument(cli):
    res = cli("list", "--help")
    assert res.rc == 0
    assert "usage: rollbench list [BENCHMARK]" in res.out
    assert "rollbench list libero" in res.out


@pytest.mark.libero
def test_list_shows_libero_90_and_all_its_tasks(cli):
    pytest.importorskip("libero")
    from rollbench.benchmarks.libero import find_assets

    if find_assets(None) is None:
        pytest.skip("no LIBERO assets installed")
    res = cli("list")
    assert res.rc == 0, res.err
    _lines_ok(res.out + res.err)
    preview = [ln for ln in res.out.splitlines() if ln.startswith("    libero_90 (90): ")]
    assert len(preview) == 1 and preview[0].endswith(" more)"), preview
    res = cli("list", "libero")
    assert res.rc == 0, res.err
    _lines_ok(res.out + res.err)
    lines = res.out.splitlines()
    start = lines.index("  libero_90 (90):") + 1
    tasks = [ln.strip() for ln in lines[start:start + 90]]
    assert all(ln.startswith("    ") for ln in lines[start:start + 90])
    assert len(set(tasks)) == 90
    assert lines[start + 90:] == [] or not lines[start + 90].startswith("    ")


# -- exit codes ---------------------------------------------------------------------


def test_ok_run_exits_0_and_writes_results(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=expert", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    assert info["status"] == "complete"
    assert info["overall"]["n_episodes"] == 6
    assert str(tmp_path / "eval_info.json") in res.out


def test_flag_with_space_separated_value(cli, tmp_path):
    res = cli(*FAKE, "--policy.type", "expert", "--eval.n_episodes", "2", "--output_dir", str(tmp_path))
    assert res.rc == 0, res.err
    assert load_info(tmp_path)["overall"]["n_episodes"] == 6


def test_bad_config_exits_2_in_a_real_process(tmp_path):
    res = run_subprocess(*FAKE, "--policy.type=expert", "--eval.n_episodes=0", f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert_one_line_error(res, "--eval.n_episodes=0", ">= 1")
    assert not (tmp_path / "o").exists()


# -- one-line errors, each naming the flag and value ---------------------------------


def test_unknown_env_type_lists_known_and_closest(cli, tmp_path):
    line = assert_one_line_error(cli("eval", "--env.type=metaworl", "--policy.type=expert", f"--output_dir={tmp_path}"))
    assert "--env.type='metaworl'" in line
    assert "Did you mean 'metaworld'?" in line
    for known in ("fake", "gym", "metaworld", "pusht"):
        assert known in line.split("Known:", 1)[1]


def test_missing_env_type(cli, tmp_path):
    assert_one_line_error(cli("eval", "--policy.type=expert", f"--output_dir={tmp_path}"), "--env.type is required", "metaworld")


@pytest.mark.metaworld
def test_unknown_metaworld_task(cli, tmp_path):
    res = cli("eval", "--env.type=metaworld", "--env.task=reach-v4", "--policy.type=expert", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, "--env.task='reach-v4'", "Did you mean 'reach-v3'?")
    assert not (tmp_path / "o").exists()


def test_unknown_policy_type(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=expertt", f"--output_dir={tmp_path}")
    line = assert_one_line_error(res, "--policy.type='expertt'", "Did you mean 'expert'?")
    for known in POLICIES.names():
        assert known in line


def test_missing_policy_type(cli, tmp_path):
    assert_one_line_error(cli(*FAKE, f"--output_dir={tmp_path}"), "--policy.type is required")


def test_a_policy_path_without_a_type_is_a_lerobot_checkpoint(cli, tmp_path):
    """As in lerobot-eval; a path that is no checkpoint says so, a module path names its type."""
    res = cli(*FAKE, f"--policy.path={tmp_path / 'nope'}", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, f"--policy.path={tmp_path / 'nope'}", "LeRobot checkpoint directory")
    res = cli(*FAKE, "--policy.path=helpers_policies:zeros", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, "--policy.path=helpers_policies:zeros", "--policy.type=module")


@pytest.mark.parametrize(
    "flag, needles",
    [
        ("--eval.n_episodes=0", ("--eval.n_episodes=0", ">= 1")),
        ("--eval.n_episodes=-3", ("--eval.n_episodes=-3", ">= 1")),
        ("--eval.batch_size=0", ("--eval.batch_size=0", ">= 1")),
        ("--seed=abc", ("--seed='abc'", "integer")),
        ("--eval.n_episodes=ten", ("--eval.n_episodes='ten'", "integer")),
        ("--eval.use_async_envs=maybe", ("--eval.use_async_envs='maybe'", "true or false")),
        ("--env.max_steps=1.5", ("--env.max_steps='1.5'", "integer")),
        ("--eval.shard_id=3", ("--eval.shard_id=3", "--eval.num_shards=1")),
        ("--eval.n_episods=3", ("--eval.n_episods", "Did you mean --eval.n_episodes?")),
        ("--env.episode_length=0", ("--env.episode_length=0", ">= 1")),
        ("--env.task=nowhere", ("--env.task='nowhere'", "near")),
        ("--bogus.flag=1", ("--bogus.flag",)),
    ],
)
def test_bad_value_one_line_error_exit_2(cli, tmp_path, flag, needles):
    out = tmp_path / "o"
    res = cli(*FAKE, "--policy.type=expert", flag, f"--output_dir={out}")
    assert_one_line_error(res, *needles)
    assert not out.exists(), "a configuration error must not create the output directory"


def test_bad_mode_lists_the_choices(cli, tmp_path):
    res = cli("eval", "--env.type=fake", "--policy.type=expert", "--eval.mode=fast", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, "--eval.mode='fast'", "auto, continuous, lockstep")


def test_flag_given_twice(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=expert", "--seed=1", "--seed=2", f"--output_dir={tmp_path}")
    assert_one_line_error(res, "--seed", "twice")


def test_unwritable_output_dir(cli, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    target = blocker / "sub"
    res = cli(*FAKE, "--policy.type=expert", "--eval.n_episodes=1", f"--output_dir={target}")
    assert_one_line_error(res, f"--output_dir={str(target)!r}", f"{blocker} is a file, not a directory")


def test_batch_size_larger_than_episodes_is_clamped_with_a_warning(cli, tmp_path, caplog):
    res = cli(*FAKE, "--policy.type=expert", "--eval.n_episodes=3", "--eval.batch_size=10", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert load_info(tmp_path)["overall"]["n_episodes"] == 9
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("--eval.batch_size=10" in w and "using 3" in w for w in warnings), warnings


def test_batch_size_clamp_warning_on_stderr_in_a_real_process(tmp_path):
    res = run_subprocess(*FAKE, "--policy.type=expert", "--eval.n_episodes=2", "--eval.batch_size=5", f"--output_dir={tmp_path}", timeout=60)
    assert res.rc == 0, res.err
    assert "WARNING: --eval.batch_size=5 is larger than --eval.n_episodes=2; using 2" in res.err
    assert "Traceback" not in res.err


# -- module policies -----------------------------------------------------------------


def test_module_policy_path_that_does_not_import(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=module", "--policy.path=no_such_module_xyz:factory", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, "--policy.path='no_such_module_xyz:factory'", "cannot import 'no_such_module_xyz'")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "path, needles",
    [
        ("helpers_policies", ("--policy.path='helpers_policies'", "pkg.mod:factory")),
        ("helpers_policies:missing", ("--policy.path='helpers_policies:missing'", "no attribute 'missing'")),
        ("helpers_policies:not_a_policy", ("--policy.path='helpers_policies:not_a_policy'", "act(batch, slots)")),
    ],
)
def test_module_policy_bad_path(cli, tmp_path, path, needles):
    res = cli(*FAKE, "--policy.type=module", f"--policy.path={path}", f"--output_dir={tmp_path / 'o'}")
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "o").exists()


def test_module_policy_that_behaves_runs(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=module", "--policy.path=helpers_policies:zeros", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    # zero actions never move the point: every episode runs to the env's step limit (20) and fails
    for task in info["per_task"]:
        assert task["metrics"]["n_steps"] == [20, 20]
        assert task["metrics"]["successes"] == [False, False]


@pytest.mark.parametrize(
    "factory, needles",
    [
        ("wrong_shape", ("shape (2, 2, 3)", "expected (2, 2)")),
        ("nan_actions", ("NaN",)),
    ],
)
def test_module_policy_misbehaving_during_the_run(cli, tmp_path, factory, needles):
    path = f"helpers_policies:{factory}"
    res = cli(*FAKE, "--policy.type=module", f"--policy.path={path}", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    # a PolicyError: the run failed (exit 1), told in one line naming the policy
    assert res.rc == 1, res.err
    line = run_error_line(res)
    assert line.startswith("rollbench: error: ")
    assert path in line and "'module'" in line
    for needle in needles:
        assert needle in line


def test_module_policy_float_actions_for_a_discrete_space(cli, tmp_path):
    path = "helpers_policies:float_actions"
    res = cli("eval", "--env.type=gym", "--env.task=CartPole-v1", "--eval.mode=lockstep", "--policy.type=module",
              f"--policy.path={path}", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert res.rc == 1, res.err
    line = run_error_line(res)
    assert line.startswith("rollbench: error: ")
    assert path in line and "float32" in line and "Discrete(2)" in line


def test_module_policy_misbehaving_in_a_real_process(tmp_path):
    path = "helpers_policies:nan_actions"
    res = run_subprocess(*FAKE, "--policy.type=module", f"--policy.path={path}", "--eval.n_episodes=2", f"--output_dir={tmp_path}", timeout=60)
    assert res.rc == 1, res.err
    line = run_error_line(res)
    assert path in line and "NaN" in line


def test_module_policy_raising_names_the_policy(cli, tmp_path):
    path = "helpers_policies:raises"
    res = cli(*FAKE, "--policy.type=module", f"--policy.path={path}", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert res.rc == 1, res.err
    line = run_error_line(res)
    assert line.startswith("rollbench: error: ")
    assert path in line and "boom from the policy" in line


@pytest.mark.parametrize("factory, flags", [
    ("raises_in_reset", ("--eval.mode=lockstep",)),
    ("raises_in_reset", ("--eval.mode=continuous", "--policy.placement=driver", "--workers=1")),
    ("cheap_raises_in_reset", ("--eval.mode=continuous", "--workers=1")),  # in the worker
])
def test_a_policy_raising_in_reset_is_one_line_naming_it(tmp_path, factory, flags):
    path = f"helpers_policies:{factory}"
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=module", f"--policy.path={path}",
                         "--eval.n_episodes=2", *flags, f"--output_dir={tmp_path}", timeout=120)
    assert res.rc == 1, res.err
    line = run_error_line(res)
    assert line.startswith("rollbench: error: ") and path in line and "ValueError in reset: boom from reset" in line
    assert "Traceback" not in res.err


def test_a_policy_built_in_each_worker_is_closed_when_the_worker_ends(tmp_path):
    log = tmp_path / "closed.log"
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_policies:closes_to_file",
                         "--eval.mode=continuous", "--workers=2", "--eval.n_episodes=2", f"--output_dir={tmp_path / 'run'}",
                         timeout=120, CLOSED_LOG=str(log))
    assert res.rc == 0, res.err
    assert load_info(tmp_path / "run")["scheduling"]["placement"] == "worker"
    closed = log.read_text().split()
    # the driver's copy (closed before the workers start), and one in each of the 2 workers
    assert closed.count("closed") == 3 and len(set(closed[1::2])) == 3


def test_eval_info_is_strict_json_after_a_cli_run(cli, tmp_path):
    res = cli(*FAKE, "--policy.type=random", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err

    def reject(name: str) -> None:
        raise AssertionError(f"{name} in JSON")

    json.loads((tmp_path / "eval_info.json").read_text(), parse_constant=reject)
    json.loads((tmp_path / "run.json").read_text(), parse_constant=reject)


def test_tune_help_documents_its_flags(cli):
    res = cli("tune", "--help")
    assert res.rc == 0
    for name in _init_fields(TuneConfig):
        assert f"--tune.{name}  (" in res.out, name
    assert "measured or estimated" in res.out


def test_a_policy_types_options_are_checked_and_spelled_once_as_their_type_spells_them(cli, tmp_path):
    """`--policy.chunk_size=03` is the run `=3` is (the options are part of a run's identity:
    a resume with the other spelling is the same run), and a value of the wrong type is one
    line naming the flag before anything runs."""
    cfg = config_from_flags({"env.type": "fake", "policy.type": "expert", "policy.chunk_size": "03",
                             "policy.action_noise": "0.50"})
    assert cfg.policy.options == {"chunk_size": "3", "action_noise": "0.5"}
    base = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert cli(*base, "--policy.chunk_size=03").rc == 0
    res = cli(*base, "--policy.chunk_size=3")
    assert res.rc == 0 and "0 episodes run" in res.out + res.err, res.out + res.err  # resumed: nothing left to run
    bad = cli(*base, "--policy.chunk_size=three")
    assert bad.rc == 2 and "--policy.chunk_size" in bad.err and len(bad.err.strip().splitlines()) == 1, bad.err
