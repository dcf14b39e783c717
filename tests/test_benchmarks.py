"""Benchmarks: the registry, plugins via $ROLLBENCH_PLUGINS, MetaWorld tasks and seeding, gym, PushT."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from conftest import REPO, TESTS, gl_in_this_process, load_info, per_episode, run_subprocess
from faulty_bench import IndexCheckEnv
from rollbench.benchmarks.fake import FakeConfig
from rollbench.config import BENCHMARKS, BenchmarkConfig, register_benchmark
from rollbench.config.env import EPISODE_INDEX_ATTR, set_episode_index
from rollbench.errors import ConfigError, UnknownNameError
from rollbench.policies.base import POLICIES

LOCKSTEP = "--eval.mode=lockstep"


# -- the episode-index hook ----------------------------------------------------------


@dataclass(frozen=True)
class _IndexedFake(FakeConfig):
    uses_episode_index = True


@pytest.mark.parametrize("use_async", [False, True])
def test_episode_index_reaches_each_sub_env_before_reset(use_async):
    """The lockstep path: one index per sub-env of a sync or async vector env."""
    envs = [functools.partial(IndexCheckEnv, 0.3, 5) for _ in range(3)]
    vec = gym.vector.AsyncVectorEnv(envs, context="forkserver") if use_async else gym.vector.SyncVectorEnv(envs)
    try:
        set_episode_index(_IndexedFake(task="near"), vec, [4, 5, 6])
        vec.reset(seed=[1004, 1005, 1006])  # IndexCheckEnv raises unless reset already sees its index
        assert list(vec.get_attr("index_at_reset")) == [4, 5, 6]
    finally:
        vec.close()


@pytest.mark.parametrize("mode", ["--eval.mode=lockstep", "--eval.mode=continuous"])
@pytest.mark.parametrize(
    "batch", ["--eval.batch_size=3", "--eval.isolation=none", "--eval.isolation=none --eval.use_async_envs=true"],
)
def test_both_schedulers_set_the_episode_index_before_each_reset(tmp_path, mode, batch):
    if mode.endswith("continuous") and "isolation=none" in batch:
        pytest.skip("continuous mode always steps envs in workers")
    """Every reset of a run sees its own episode's index (the env raises otherwise, and a
    raising reset is a failed unit): first resets, and resets of a reused env alike."""
    res = run_subprocess(
        "eval", "--env.type=indexed", "--env.task=near,far", "--policy.type=expert", "--eval.n_episodes=7", mode,
        *batch.split(), "--workers=2", f"--output_dir={tmp_path}", timeout=120, ROLLBENCH_PLUGINS="faulty_bench",
    )
    assert res.rc == 0, res.err[-2000:]
    info = load_info(tmp_path)
    assert info["overall"]["n_failed"] == 0 and info["overall"]["n_episodes"] == 14


def test_episode_index_is_set_only_for_benchmarks_that_use_it():
    """The continuous path: one env; a benchmark that does not opt in gets nothing set."""
    env = _IndexedFake(task="near").make_task_env("near")
    set_episode_index(_IndexedFake(task="near"), env, [9])
    assert getattr(env, EPISODE_INDEX_ATTR) == 9
    plain = FakeConfig(task="near").make_task_env("near")
    set_episode_index(FakeConfig(task="near"), plain, [9])
    assert not hasattr(plain, EPISODE_INDEX_ATTR)


# -- registry ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "registry, name, closest",
    [(BENCHMARKS, "metaworl", "metaworld"), (BENCHMARKS, "push-t", "pusht"), (POLICIES, "randm", "random")],
)
def test_unknown_name_suggests_the_closest(registry, name, closest):
    with pytest.raises(UnknownNameError) as err:
        registry.get(name)
    msg = str(err.value)
    assert f"Did you mean {closest!r}?" in msg
    for known in registry.names():
        assert known in msg.split("Known:", 1)[1]


def test_unknown_name_far_from_everything_has_no_suggestion():
    with pytest.raises(UnknownNameError) as err:
        BENCHMARKS.get("zzzzzzzz")
    assert "Did you mean" not in str(err.value)


@pytest.fixture
def scratch_names():
    """Names registered by a test are removed afterwards, so no other test sees them."""
    names: list[str] = []
    yield names
    for name in names:
        BENCHMARKS._entries.pop(name, None)


def _tiny(doc: str) -> type[BenchmarkConfig]:
    @dataclass(frozen=True)
    class Tiny(BenchmarkConfig):
        def tasks(self) -> dict[str, list[str]]:
            return {"t": ["t"]}

    Tiny.__doc__ = doc
    return Tiny


def test_duplicate_registration_is_an_error(scratch_names):
    scratch_names.append("dup-test-bench")
    first = register_benchmark("dup-test-bench")(_tiny("first"))
    assert BENCHMARKS.get("dup-test-bench") is first
    register_benchmark("dup-test-bench")(first)  # the same class again (a re-import) is fine
    with pytest.raises(ConfigError, match="'dup-test-bench' is registered twice"):
        register_benchmark("dup-test-bench")(_tiny("second"))
    assert BENCHMARKS.get("dup-test-bench") is first


def test_registering_over_a_loaded_builtin_is_an_error():
    BENCHMARKS.get("fake")  # loaded
    with pytest.raises(ConfigError, match="registered twice"):
        register_benchmark("fake")(_tiny("impostor"))
    assert BENCHMARKS.get("fake").__name__ == "FakeConfig"


def test_registering_over_a_lazy_builtin_is_an_error(scratch_names):
    from rollbench.registry import Registry

    reg: Registry[type] = Registry("benchmark")
    reg.add_lazy("metaworld", "rollbench.benchmarks.metaworld:MetaWorldConfig")
    with pytest.raises(ConfigError, match="already taken"):
        reg.register("metaworld")(_tiny("impostor"))


# -- a benchmark from a plugin module, through the real CLI ---------------------------


def test_plugin_benchmark_selectable_via_env_var(tmp_path):
    """tests/corridor_bench.py (the example of docs/adding_a_benchmark.md) registers `corridor`."""
    plugin = {"ROLLBENCH_PLUGINS": "corridor_bench"}
    listed = run_subprocess("list", timeout=120, **plugin)
    assert listed.rc == 0, listed.err
    assert "corridor: Walk a corridor" in listed.out
    helped = run_subprocess("eval", "--help", timeout=120, **plugin)
    assert "--env.speed" in helped.out.split("--env.type=corridor:", 1)[1]

    res = run_subprocess(
        "eval", "--env.type=corridor", "--policy.type=expert", "--eval.n_episodes=6", LOCKSTEP,
        "--eval.batch_size=4", f"--output_dir={tmp_path}", timeout=120, **plugin,
    )
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    assert [t["task"] for t in info["per_task"]] == ["short", "long"]
    # the expert walks one cell per step to the goal drawn by gymnasium's seeding: steps == goal
    for task in info["per_task"]:
        length = {"short": 3, "long": 8}[task["task"]]
        expected = [int(np.random.default_rng(s).integers(1, length + 1)) for s in task["metrics"]["seeds"]]
        assert task["metrics"]["n_steps"] == expected
        assert all(task["metrics"]["successes"])
    assert info["config"]["env"] == {
        "type": "corridor", "task": "short,long", "episode_length": None, "state_keys": [], "camera_keys": [], "speed": 1.0,
    }

    # without the plugin the name is unknown, with a one-line error
    res = run_subprocess("eval", "--env.type=corridor", "--policy.type=expert", f"--output_dir={tmp_path / 'x'}", timeout=60)
    assert res.rc == 2
    assert res.err.strip().splitlines() == [res.err.strip()]
    assert "no benchmark named 'corridor'" in res.err


def test_plugin_that_does_not_import_is_a_config_error(tmp_path):
    res = run_subprocess("list", timeout=60, ROLLBENCH_PLUGINS="no_such_plugin_module_xyz")
    assert res.rc == 2
    assert "ROLLBENCH_PLUGINS" in res.err and "no_such_plugin_module_xyz" in res.err
    assert "Traceback" not in res.err


def test_adding_a_benchmark_doc_example_is_the_tested_plugin():
    doc = (REPO / "docs" / "adding_a_benchmark.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    example = (TESTS / "corridor_bench.py").read_text()
    assert example in blocks, "docs/adding_a_benchmark.md must show tests/corridor_bench.py verbatim"


# -- MetaWorld -----------------------------------------------------------------------


@pytest.mark.metaworld
def test_metaworld_task_parsing():
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, MT10_V3

    from rollbench.benchmarks.metaworld import MetaWorldConfig

    assert MetaWorldConfig(task="reach-v3").tasks() == {"reach-v3": ["reach-v3"]}
    assert MetaWorldConfig(task="reach-v3, push-v3").tasks() == {"reach-v3": ["reach-v3"], "push-v3": ["push-v3"]}
    assert MetaWorldConfig(task="mt10").tasks() == {"mt10": list(MT10_V3)}
    assert len(MT10_V3) == 10
    mt50 = MetaWorldConfig(task="mt50").tasks()["mt50"]
    assert len(mt50) == 50 and set(mt50) == set(ALL_V3_ENVIRONMENTS)
    # the paper's difficulty groups: 28 + 11 + 6 + 5, disjoint, covering MT50
    sizes = {"easy": 28, "medium": 11, "hard": 6, "very_hard": 5}
    seen: set[str] = set()
    for group, size in sizes.items():
        names = MetaWorldConfig(task=group).tasks()[group]
        assert len(names) == len(set(names)) == size, group
        assert not seen & set(names)
        seen |= set(names)
    assert seen == set(ALL_V3_ENVIRONMENTS)
    both = MetaWorldConfig(task="hard,reach-v3").tasks()
    assert list(both) == ["hard", "reach-v3"]


@pytest.mark.metaworld
@pytest.mark.parametrize("task, closest", [("reach-v2", "reach-v3"), ("mt11", "mt10"), ("eazy", "easy")])
def test_metaworld_unknown_task_suggests(task, closest):
    from rollbench.benchmarks.metaworld import MetaWorldConfig

    with pytest.raises(ConfigError, match=f"Did you mean {closest!r}"):
        MetaWorldConfig(task=task).tasks()


@pytest.mark.metaworld
def test_metaworld_task_group_in_results(cli, tmp_path):
    from metaworld.env_dict import MT10_V3

    res = cli("eval", "--env.type=metaworld", "--env.task=push-v3,mt10", "--policy.type=random", "--eval.n_episodes=1",
              "--env.episode_length=3", LOCKSTEP, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    rows = [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]]
    assert rows == [("push-v3", 0, "push-v3")] + [("mt10", i, name) for i, name in enumerate(MT10_V3)]
    assert info["per_group"]["mt10"]["n_episodes"] == 10
    assert info["per_group"]["push-v3"]["n_episodes"] == 1
    assert all(t["metrics"]["n_steps"] == [3] for t in info["per_task"])


@pytest.mark.metaworld
def test_metaworld_goal_is_a_function_of_the_seed():
    from rollbench.benchmarks.metaworld import MetaWorldConfig

    bench = MetaWorldConfig(task="reach-v3")
    env = bench.make_task_env("reach-v3")
    other = bench.make_task_env("reach-v3")
    try:
        first, _ = env.reset(seed=5)
        np.random.seed(123)  # MetaWorld draws goals from the global RNG unless seeded: it must not matter
        second, _ = env.reset(seed=6)
        np.random.seed(999)
        again, _ = other.reset(seed=5)
        goal = slice(36, 39)  # the 39-d state ends with the goal position
        assert np.array_equal(first["environment_state"], again["environment_state"])
        assert not np.allclose(first["environment_state"][goal], second["environment_state"][goal])
    finally:
        env.close()
        other.close()


@pytest.mark.metaworld
def test_metaworld_same_seed_same_episodes_other_seed_other_episodes(cli, tmp_path):
    def run(name: str, seed: int) -> dict:
        res = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", "--policy.type=random", "--eval.n_episodes=2",
                  "--env.episode_length=40", LOCKSTEP, f"--seed={seed}", f"--output_dir={tmp_path / name}")
        assert res.rc == 0, res.err
        return {k[2]: v[:4] for k, v in per_episode(tmp_path / name).items()}

    a, b, c = run("a", 1000), run("b", 1000), run("c", 2000)
    assert a == b
    assert a[0] != c[0] and a[1] != c[1]
    assert a[0] != a[1]


@pytest.mark.metaworld
def test_metaworld_expert_succeeds_on_most_episodes(cli, tmp_path):
    res = cli("eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3,drawer-close-v3", "--policy.type=expert",
              "--eval.n_episodes=3", LOCKSTEP, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    assert info["overall"]["n_episodes"] == 9
    assert info["overall"]["pc_success"] >= 80
    for task in info["per_task"]:
        # MetaWorld ends an episode at its first success: successful episodes are shorter than 500 steps
        for ok, steps in zip(task["metrics"]["successes"], task["metrics"]["n_steps"], strict=True):
            assert steps < 500 if ok else steps == 500


@pytest.mark.metaworld
def test_metaworld_expert_needs_state_observations(cli, tmp_path):
    res = cli("eval", "--env.type=metaworld", "--env.task=reach-v3", "--env.obs_type=pixels_agent_pos",
              "--policy.type=expert", LOCKSTEP, f"--output_dir={tmp_path / 'o'}")
    assert res.rc == 2
    assert "--env.obs_type=state" in res.err and "Traceback" not in res.err
    assert not (tmp_path / "o").exists()


# -- gym -----------------------------------------------------------------------------


def test_gym_cartpole_random_runs(cli, tmp_path):
    res = cli("eval", "--env.type=gym", "--env.task=CartPole-v1", "--policy.type=random", "--eval.n_episodes=4",
              "--eval.batch_size=2", LOCKSTEP, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    (task,) = info["per_task"]
    m = task["metrics"]
    assert task["task"] == "CartPole-v1" and m["seeds"] == [1000, 1001, 1002, 1003]
    # CartPole pays 1 per step, terminates when the pole falls and reports no success
    assert m["sum_rewards"] == [float(n) for n in m["n_steps"]]
    assert all(1 <= n <= 500 for n in m["n_steps"]) and len(set(m["n_steps"])) > 1
    assert m["successes"] == [False] * 4


def test_gym_episode_length_cuts_episodes(cli, tmp_path):
    res = cli("eval", "--env.type=gym", "--env.task=CartPole-v1", "--policy.type=module", "--eval.n_episodes=2",
              "--policy.path=helpers_policies:zeros", "--env.episode_length=5", LOCKSTEP, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert load_info(tmp_path)["per_task"][0]["metrics"]["n_steps"] == [5, 5]


@pytest.mark.parametrize("task", ["nonexistent_pkg/Foo-v0", "nonexistent_pkg:Foo-v0"])
def test_gym_id_with_missing_package_names_it(cli, tmp_path, task):
    res = cli("eval", "--env.type=gym", f"--env.task={task}", "--policy.type=random", f"--output_dir={tmp_path / 'o'}")
    assert res.rc == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err
    assert f"--env.task={task!r}" in lines[0]
    assert "'nonexistent_pkg'" in lines[0] and "pip install nonexistent_pkg" in lines[0]
    assert not (tmp_path / "o").exists()


def test_gym_unknown_id_suggests(cli, tmp_path):
    res = cli("eval", "--env.type=gym", "--env.task=CartPole-v9", "--policy.type=random", f"--output_dir={tmp_path / 'o'}")
    assert res.rc == 2
    assert "Did you mean 'CartPole-v1'?" in res.err


# -- PushT ---------------------------------------------------------------------------


@pytest.mark.pusht
def test_pusht_expert_errors_clearly(cli, tmp_path):
    res = cli("eval", "--env.type=pusht", "--policy.type=expert", LOCKSTEP, f"--output_dir={tmp_path / 'o'}")
    assert res.rc == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err
    assert "--policy.type=expert" in lines[0] and "'pusht'" in lines[0] and "no scripted expert" in lines[0]
    assert not Path(tmp_path / "o").exists(), "the policy check must come before any output is written"


@pytest.mark.pusht
def test_pusht_random_state_runs(cli, tmp_path):
    res = cli("eval", "--env.type=pusht", "--env.obs_type=state", "--policy.type=random", "--eval.n_episodes=2",
              "--env.episode_length=20", LOCKSTEP, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    (task,) = info["per_task"]
    assert (task["task_group"], task["task"]) == ("pusht", "PushT-v0")
    assert task["metrics"]["n_steps"] == [20, 20]
    assert all(0.0 <= r <= 1.0 for r in task["metrics"]["max_rewards"])  # coverage-based reward
    assert info["versions"]["gym-pusht"] != "not installed"


@pytest.mark.metaworld
def test_metaworld_pixel_obs_and_video_frame_of_a_step_are_one_render():
    """A pixel observation and the video frame of the same step are the same image: one
    render serves both (a CPU frame costs ~100 ms at 480²), and a step renders anew."""

    from rollbench.benchmarks.metaworld import MetaWorldConfig

    gl_in_this_process()
    bench = MetaWorldConfig(task="reach-v3", obs_type="pixels_agent_pos", observation_width=48, observation_height=48)
    env = bench.make_task_env("reach-v3")
    inner = env.unwrapped
    renders = []
    real_render = inner._render
    inner._render = lambda: renders.append(1) or real_render()
    try:
        obs, _ = env.reset(seed=1)
        frame = env.render()
        assert len(renders) == 1 and np.array_equal(frame, obs["pixels"])
        frame[:] = 0  # the caller's copy: the next observation is not touched
        first = obs["pixels"].copy()
        for t in range(1, 6):
            obs, *_ = env.step(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32))
            assert np.array_equal(env.render(), obs["pixels"]) and len(renders) == 1 + t
        assert not np.array_equal(obs["pixels"], first)  # the arm moved: a step renders anew
        assert np.array_equal(env.render(), obs["pixels"])
    finally:
        env.close()
