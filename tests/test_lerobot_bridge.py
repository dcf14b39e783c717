"""LeRobot's env registry through rollbench (`--env.type=lerobot`) and LeRobot's EnvHub files
(`--env.type=hub`): a real `lerobot_env_*` plugin end to end, LeRobot's PushT equal episode for
episode to rollbench's own, what the policy sees equal to what lerobot-eval gives it, and one-line
errors for bad input. Skipped where lerobot is not installed."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot")

from conftest import assert_same_per_episode, load_info, per_episode, run_subprocess, subprocess_env
from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.lerobot_env import LerobotEnvConfig

pytestmark = [pytest.mark.lerobot]

SEED = 1000


def _one_line_error(res, out: Path, *words: str) -> None:
    assert res.rc == 2, (res.out, res.err)
    lines = [ln for ln in res.err.strip().splitlines() if ln.startswith("rollbench:")]
    assert len(lines) == 1 and lines[0].startswith("rollbench: error:"), res.err
    assert "Traceback" not in res.err
    for w in words:
        assert w in lines[0], lines[0]
    assert not out.exists()


# -- (a) a real third-party plugin, lerobot-env-so101 ------------------------------------------


@pytest.mark.slow
def test_so101_plugin_end_to_end(cli, tmp_path: Path) -> None:
    """lerobot-env-so101 is found as LeRobot finds plugins, built by LeRobot's factory with fields
    of its own config, in worker processes and in this one, with the same episodes; sharded
    and resumed, too."""
    if importlib.util.find_spec("lerobot_env_so101") is None:  # not imported here: rollbench imports it as a plugin
        pytest.skip("lerobot-env-so101 is not installed (the Makefile's install-dev installs it)")
    flags = ["eval", "--env.type=lerobot", "--env.name=so101", "--env.episode_length=15",
             "--env.fields=reward_type=dense,random_block_position=true,action_scale=0.025",
             "--policy.type=random", "--eval.n_episodes=3", f"--seed={SEED}", "--eval.report=false"]
    a = cli(*flags, "--eval.mode=continuous", "--workers=2", f"--output_dir={tmp_path / 'c'}")
    assert a.rc == 0, a.err
    info = load_info(tmp_path / "c")
    (task,) = info["per_task"]
    assert (task["task_group"], task["task"], task["task_id"]) == ("so101", "so101", 0)
    assert info["versions"]["lerobot_env_so101"] == "0.4.0"
    eps = per_episode(tmp_path / "c")
    assert [eps[("so101", 0, i)][4] for i in range(3)] == [SEED, SEED + 1, SEED + 2]
    assert all(0 < v[3] <= 15 for v in eps.values())
    rewards = [v[1] for v in eps.values()]
    assert all(r != 0 for r in rewards) and len(set(rewards)) == 3  # dense reward, a block per seed
    b = cli(*flags, "--eval.mode=lockstep", "--eval.isolation=none", f"--output_dir={tmp_path / 'l'}")
    assert b.rc == 0, b.err
    assert per_episode(tmp_path / "l") == eps
    # sharded and resumed: shard 0 of 2 runs alone, then the launcher resumes the run (shard 0
    # has nothing left, shard 1 runs) and merges: the unsharded run's episodes
    sharded = ["--eval.num_shards=2", f"--output_dir={tmp_path / 's'}"]
    first = cli(*flags, *sharded, "--eval.shard_id=0")
    assert first.rc == 0, first.err
    assert len(per_episode(tmp_path / "s")) == 2
    rest = cli(*flags, *sharded, "--executor=shards")
    assert rest.rc == 0, rest.err
    assert per_episode(tmp_path / "s") == eps


# -- (b) LeRobot's PushT through the bridge == rollbench's own PushT ---------------------------


@pytest.fixture(scope="module")
def pusht_ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gym_pusht")
    from rollbench.benchmarks.pusht import PushTConfig

    root = tmp_path_factory.mktemp("ckpt")
    return {obs: make_checkpoint(root / obs, PushTConfig(obs_type=obs)) for obs in ("pixels_agent_pos", "environment_state_agent_pos")}


@pytest.mark.pusht
@pytest.mark.parametrize(
    ("obs_type", "mode"),
    [("pixels_agent_pos", ["--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=2"]),
     ("environment_state_agent_pos", ["--eval.mode=continuous", "--workers=2"])],
)
def test_pusht_through_the_bridge_equals_native(cli, tmp_path: Path, pusht_ckpts: dict[str, Path], obs_type: str, mode: list[str]) -> None:
    """The same ACT checkpoint, seeds and step limit: every episode's success, sum and max
    reward and length are equal, bit for bit (LeRobot's fields pass through --env.fields)."""
    common = [f"--policy.path={pusht_ckpts[obs_type]}", "--eval.n_episodes=4", "--env.episode_length=30",
              f"--seed={SEED}", "--eval.report=false", *mode]
    native = cli("eval", "--env.type=pusht", f"--env.obs_type={obs_type}", *common, f"--output_dir={tmp_path / 'n'}")
    assert native.rc == 0, native.err
    fields = [] if obs_type == "pixels_agent_pos" else [f"--env.fields=obs_type={obs_type}"]
    bridge = cli("eval", "--env.type=lerobot", "--env.name=pusht", *fields, *common, f"--output_dir={tmp_path / 'b'}")
    assert bridge.rc == 0, bridge.err
    ours, theirs = per_episode(tmp_path / "n"), per_episode(tmp_path / "b")
    assert [k[2] for k in ours] == [k[2] for k in theirs] == [0, 1, 2, 3]
    assert list(ours.values()) == list(theirs.values())
    assert any(v[1] > 0 for v in ours.values()), "some reward, or the comparison says little"
    assert load_info(tmp_path / "b")["per_task"][0]["task"] == "pusht"
    # the preflight through the bridge: one real observation of LeRobot's env against the checkpoint
    check = cli("check", "--env.type=lerobot", "--env.name=pusht", *fields, f"--policy.path={pusht_ckpts[obs_type]}")
    assert check.rc == 0 and "it fits" in check.out, check.out + check.err


@pytest.mark.pusht
def test_the_policy_sees_what_lerobot_eval_gives_it() -> None:
    """LeRobot's vector env, preprocess_observation and env processor on reset observations ==
    the bridge's batch after the LeRobot adapter's conversion, tensor for tensor (and == rollbench's
    own PushT's)."""
    pytest.importorskip("gym_pusht")
    import torch
    from lerobot.envs.configs import PushtEnv
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.envs.utils import preprocess_observation

    from rollbench.benchmarks.pusht import PushTConfig
    from rollbench.policies.lerobot import to_policy_batch

    seeds = [SEED, SEED + 1]
    vec = make_env(PushtEnv(), n_envs=2)["pusht"][0]
    try:
        obs, _ = vec.reset(seed=seeds)
        pre, _ = make_env_pre_post_processors(PushtEnv(), None)
        theirs = {k: v for k, v in pre(preprocess_observation(obs)).items() if k.startswith("observation.")}
    finally:
        vec.close()

    def batch_of(bench) -> dict:
        envs = [bench.make_task_env(bench.tasks()[next(iter(bench.tasks()))][0]) for _ in seeds]
        try:
            rows = [env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]
        finally:
            for env in envs:
                env.close()
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        env_pre, _ = bench.get_env_processors()
        return to_policy_batch(env_pre(bench.to_features(stacked)))

    for bench in (LerobotEnvConfig(name="pusht"), PushTConfig()):
        ours = batch_of(bench)
        assert set(ours) - {"task"} == set(theirs) == {"observation.image", "observation.state"}
        for key, value in theirs.items():
            assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key


# -- LeRobot's {suite: {task_id: VectorEnv}} as task groups -----------------------------------


@pytest.mark.metaworld
def test_metaworld_groups_map_to_task_groups_without_building_an_env(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("metaworld")
    import lerobot.envs.metaworld as lmw

    def refuse(*args, **kwargs):
        raise AssertionError("listing the tasks built a simulator")

    monkeypatch.setattr(lmw.MetaworldEnv, "__init__", refuse)
    tasks = LerobotEnvConfig(name="metaworld", task="easy,medium,reach-v3").tasks()
    assert list(tasks) == ["easy", "medium", "reach-v3"]
    assert tasks["easy"] == [f"easy/{i}" for i in range(len(lmw.DIFFICULTY_TO_TASKS["easy"]))]
    assert len(tasks["medium"]) == len(lmw.DIFFICULTY_TO_TASKS["medium"])
    assert tasks["reach-v3"] == ["reach-v3"]


#: both metaworld tests' flags: two task groups, 2 episodes of at most 10 steps, in this process
METAWORLD = ("--env.task=reach-v3,push-v3", "--env.episode_length=10", "--policy.type=random", "--eval.n_episodes=2",
             f"--seed={SEED}", "--eval.mode=lockstep", "--eval.isolation=none", "--eval.report=false",
             "--eval.max_episodes_rendered=0")


@pytest.fixture(scope="module")
def metaworld_bridge_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of LeRobot's own MetaWorld env through the bridge, which both metaworld tests read."""
    pytest.importorskip("metaworld")
    from rollbench.rendering import choose_backend

    out = tmp_path_factory.mktemp("metaworld") / "b"
    res = run_subprocess("eval", "--env.type=lerobot", "--env.name=metaworld", *METAWORLD, f"--output_dir={out}",
                         MUJOCO_GL=choose_backend("auto"))
    assert res.rc == 0, res.err[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.metaworld
def test_metaworld_through_the_bridge(metaworld_bridge_run: Path) -> None:
    """LeRobot's own MetaWorld env (pixels, its task descriptions), two task groups."""
    got = {(t["task_group"], t["task"]): (t["description"], t["metrics"]["n_steps"])
           for t in load_info(metaworld_bridge_run)["per_task"]}
    assert got == {("reach-v3", "reach-v3"): ("Reach a goal position", [10, 10]),
                   ("push-v3", "push-v3"): ("Push the puck to a goal", [10, 10])}


@pytest.mark.slow
@pytest.mark.metaworld
def test_metaworld_through_the_bridge_equals_native(metaworld_bridge_run: Path, tmp_path: Path) -> None:
    """LeRobot's MetaWorld env with its goals seeded from each episode's seed (`SeededGoals`) ==
    rollbench's `--env.type=metaworld` at LeRobot's image settings (480x480 pixels_agent_pos),
    per episode: same seeds, same random actions, so equal rewards mean equal goals and physics."""
    from rollbench.rendering import choose_backend

    native = run_subprocess("eval", "--env.type=metaworld", "--env.obs_type=pixels_agent_pos",
                            "--env.observation_width=480", "--env.observation_height=480", *METAWORLD,
                            f"--output_dir={tmp_path / 'n'}", MUJOCO_GL=choose_backend("auto"))
    assert native.rc == 0, native.err[-3000:]

    def by_task(out: Path) -> dict[tuple[str, int], Any]:
        tasks = {(t["task_group"], t["task_id"]): t["task"] for t in load_info(out)["per_task"]}
        return {(tasks[(g, i)], n): v for (g, i, n), v in per_episode(out).items()}

    ours, theirs = by_task(tmp_path / "n"), by_task(metaworld_bridge_run)
    assert len(ours) == 4
    assert_same_per_episode(ours, theirs)  # two processes: MuJoCo's sums may differ by an ulp
    assert len({v[1] for v in ours.values()}) == 4, "every episode its own goal and rewards"


# -- (c) LeRobot's EnvHub file through --env.type=hub -----------------------------------------

ENVHUB = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np
    {vec_import}

    BUILT = []  # one entry per env constructed in this process

    class Walk(gym.Env):
        def __init__(self, goal):
            BUILT.append(goal)
            self.goal = goal
            self.task_description = f"walk to {{goal}}"
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
            self.observation_space = gym.spaces.Dict({{"agent_pos": gym.spaces.Box(-100, 100, (2,), np.float64)}})

        def _obs(self):
            return {{"agent_pos": np.array([self.x, self.goal])}}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x = float(self.np_random.uniform(-1, 1))
            return self._obs(), {{}}

        def step(self, action):
            self.x += float(action[0])
            ok = abs(self.x - self.goal) < 0.3
            return self._obs(), -abs(self.x - self.goal), ok, False, {{"is_success": ok}}

    def one(goal, steps):
        return lambda: gym.wrappers.TimeLimit(Walk(goal), steps)  # lerobot-eval's limit: _max_episode_steps

    def make_env(n_envs=1, use_async_envs=False, cfg=None):
        assert cfg is not None and cfg.hub_path  # rollbench passes its config, as LeRobot passes its own
        {make_body}
    '''
)

FORMS = {
    # gym.vector looked up when make_env runs: rollbench records the factories, builds nothing
    "dict": ("", 'Vec = gym.vector.SyncVectorEnv\n    return {"near": {0: Vec([one(1.0, 6)] * n_envs), 3: Vec([one(20.0, 9)] * n_envs)}, '
                 '"far": {0: Vec([one(50.0, 5)] * n_envs)}}'),
    # a class imported by name builds its envs; rollbench takes its factories and closes it
    "dict-imported": ("from gymnasium.vector import SyncVectorEnv",
                      'return {"near": {0: SyncVectorEnv([one(1.0, 6)] * n_envs), 3: SyncVectorEnv([one(20.0, 9)] * n_envs)}, '
                      '"far": {0: SyncVectorEnv([one(50.0, 5)] * n_envs)}}'),
    "single-env": ("", "return one(1.0, 6)()"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_envhub_file_through_hub(cli, tmp_path: Path, form: str) -> None:
    from rollbench.benchmarks.envhub import HubConfig

    vec_import, body = FORMS[form]
    path = tmp_path / "walk_env.py"
    path.write_text(ENVHUB.format(vec_import=vec_import, make_body=body))
    hub = HubConfig(hub_path=str(path))
    expect = {"near": ["near/0", "near/3"], "far": ["far"]} if form != "single-env" else {"hub_env": ["hub_env"]}
    assert hub.tasks() == expect
    if form == "dict":
        assert hub.module.BUILT == []  # listing the suites built no env
    flags = ["eval", "--env.type=hub", f"--env.hub_path={path}", "--trust_remote_code=true", "--policy.type=random",
             "--eval.n_episodes=2", "--eval.report=false"]
    a = cli(*flags, "--eval.mode=lockstep", "--eval.isolation=none", f"--output_dir={tmp_path / 'l'}")
    b = cli(*flags, "--eval.mode=continuous", "--workers=2", f"--output_dir={tmp_path / 'c'}")
    assert a.rc == 0 and b.rc == 0, a.err + b.err
    assert per_episode(tmp_path / "l") == per_episode(tmp_path / "c")
    info = load_info(tmp_path / "l")
    limits = {"near/0": 6, "near/3": 9, "far": 5, "hub_env": 6}  # goals out of reach run to the limit
    for t in info["per_task"]:
        assert t["task_group"] in expect and t["task"] in expect[t["task_group"]]
        steps = t["metrics"]["n_steps"]
        assert all(n <= limits[t["task"]] for n in steps) if t["task"] in ("near/0", "hub_env") else steps == [limits[t["task"]]] * 2
        # LeRobot's add_envs_task reads the outer (TimeLimit) env's attribute, which it has not
        assert t["description"] == ""


def test_envhub_file_from_a_hub_id(tmp_path: Path) -> None:
    """`--env.hub_path=ORG/NAME[@REV][:FILE]`, as LeRobot's make_env takes it: the driver finds the
    repository in a cache built by hand (HF_HUB_OFFLINE=1), pins the path to its commit, and the
    worker processes load that commit's file: the episodes of the same file given by path."""
    commit = "c" * 40
    snapshot = tmp_path / "hub" / "models--rollbench-test--walk" / "snapshots" / commit
    (snapshot / "envs").mkdir(parents=True)
    source = ENVHUB.format(vec_import="", make_body=FORMS["dict"][1])
    (snapshot / "envs" / "walk.py").write_text(source)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(commit)
    (tmp_path / "walk.py").write_text(source)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    flags = ["eval", "--env.type=hub", "--trust_remote_code=true", "--policy.type=random", "--eval.n_episodes=2",
             "--eval.report=false", "--eval.mode=continuous", "--workers=2"]
    by_id = run_subprocess(*flags, "--env.hub_path=rollbench-test/walk:envs/walk.py", f"--output_dir={tmp_path / 'id'}", **env)
    assert by_id.rc == 0, by_id.err[-3000:]
    by_path = run_subprocess(*flags, f"--env.hub_path={tmp_path / 'walk.py'}", f"--output_dir={tmp_path / 'path'}", **env)
    assert by_path.rc == 0, by_path.err[-3000:]
    assert per_episode(tmp_path / "id") == per_episode(tmp_path / "path") and len(per_episode(tmp_path / "id")) == 6
    assert load_info(tmp_path / "id")["config"]["env"]["hub_path"] == f"rollbench-test/walk@{commit}:envs/walk.py"
    # a file the repository does not have, and a repository the cache does not have: one line each
    for hub_path, words in (("rollbench-test/walk:nope.py", ["has no nope.py"]),
                            ("rollbench-test/other", ["HF_HUB_OFFLINE", "not in the cache"])):
        res = run_subprocess(*flags, f"--env.hub_path={hub_path}", f"--output_dir={tmp_path / 'bad'}", **env)
        errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
        assert res.rc == 2 and len(errors) == 1 and "Traceback" not in res.err, res.err
        assert all(w in errors[0] for w in words), errors[0]
        assert not (tmp_path / "bad").exists()


def test_serve_asks_consent_before_it_imports_an_envhub_file(tmp_path: Path) -> None:
    from rollbench.errors import ConfigError
    from rollbench.serve.command import build_server

    path = tmp_path / "boom.py"
    path.write_text("raise SystemExit('imported without consent')\n")
    with pytest.raises(ConfigError, match="--trust_remote_code=true"):
        build_server({"env.type": "hub", "env.hub_path": str(path), "policy.type": "random"})


# -- (d) bad input: one line, exit 2, nothing written -----------------------------------------


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--env.name=pusx"], ["--env.name='pusx'", "Did you mean 'pusht'", "pusht", "metaworld", "pip install lerobot-env-pusx"]),
        ([], ["--env.name is required", "pusht", "aloha"]),
        (["--env.name=pusht", "--env.fields=obs_typo=state"], ["--env.fields", "obs_typo=state", "Did you mean 'obs_type'", "visualization_width"]),
        (["--env.name=pusht", "--env.fields=episode_length=5"], ["--env.episode_length=5"]),
        (["--env.name=pusht", "--env.fields=obs_type"], ["--env.fields", "key=value"]),
        (["--env.name=pusht", "--env.fields=visualization_width=wide"], ["PushtEnv", "visualization_width", "wide"]),
        (["--env.name=pusht", "--env.fields=obs_type=nope"], ["LeRobot cannot build task pusht", "--env.fields", "nope"]),
    ],
    ids=["unknown-name", "no-name", "unknown-field", "own-flag-in-fields", "not-key-value", "bad-value", "unbuildable"],
)
def test_bad_input_is_one_line_exit_2_nothing_written(cli, tmp_path: Path, flags: list[str], words: list[str]) -> None:
    if any("pusht" in f for f in flags):
        pytest.importorskip("gym_pusht")
    out = tmp_path / "out"
    res = cli("eval", "--env.type=lerobot", *flags, "--policy.type=random", f"--output_dir={out}")
    _one_line_error(res, out, *words)


def test_a_plugin_that_fails_to_import_is_named_with_its_error(tmp_path: Path) -> None:
    """A `lerobot_env_*` distribution whose import raises: the run stops in one line that names
    the plugin and its own error (a broken plugin does not hide the others)."""
    site = tmp_path / "site"
    (site / "lerobot_env_broken").mkdir(parents=True)
    (site / "lerobot_env_broken" / "__init__.py").write_text('raise ImportError("needs the simulator broksim")\n')
    (site / "lerobot_env_broken-0.1.dist-info").mkdir()
    (site / "lerobot_env_broken-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lerobot-env-broken\nVersion: 0.1\n")
    res = run_subprocess("eval", "--env.type=lerobot", "--env.name=broken", "--policy.type=random",
                         f"--output_dir={tmp_path / 'out'}", PYTHONPATH=str(site))
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert res.rc == 2 and len(errors) == 1 and "Traceback" not in res.err, res.err
    assert "lerobot_env_broken (ImportError: needs the simulator broksim)" in errors[0]
    assert not (tmp_path / "out").exists()


def test_an_envhub_file_without_make_env_is_one_line(cli, tmp_path: Path) -> None:
    path = tmp_path / "env.py"
    path.write_text("X = 1\n")
    res = cli("eval", "--env.type=hub", f"--env.hub_path={path}", "--trust_remote_code=true", "--policy.type=random",
              f"--output_dir={tmp_path / 'out'}")
    assert res.rc == 2 and "defines no make_env" in res.err and "Traceback" not in res.err, res.err
    assert not (tmp_path / "out").exists()


# -- (e) LeRobot 0.6's multi-task env configs (libero_plus, robocasa, robomme, robotwin, vlabench) --

# A stand-in built as those five are: an EnvConfig registered with `register_subclass`, its own
# `create_envs` returning {suite: {task_id: vec_env}} that picks the vector env class with
# LeRobot's `_make_vec_env_cls` and wraps an async one in LeRobot's `_LazyAsyncVectorEnv` (the
# `env_cls is gym.vector.AsyncVectorEnv` test), its own `get_env_processors`, and envs that set
# their own `_max_episode_steps` and `task_description`. Its env shows the target before the
# position and moves against its action; its processors put the target last and flip the action
# back, so `--policy.type=steer` reaches every target only if each runs exactly once per step.
REACH_SUITES = textwrap.dedent(
    """
    from dataclasses import dataclass
    from functools import partial

    import gymnasium as gym
    import numpy as np
    import torch
    from lerobot.envs.configs import EnvConfig, _make_vec_env_cls
    from lerobot.envs.utils import _LazyAsyncVectorEnv
    from lerobot.processor import ObservationProcessorStep, PolicyActionProcessorStep, PolicyProcessorPipeline

    SUITES = {"near": {0: 0.3, 3: 0.6}, "far": {1: 1.2}}  # suite -> LeRobot task id -> distance to the target

    class Reach(gym.Env):
        def __init__(self, distance, episode_length):
            self.distance = distance
            self._max_episode_steps = episode_length
            self.task_description = f"reach a target {distance} away"
            self.observation_space = gym.spaces.Dict(
                {"environment_state": gym.spaces.Box(-10.0, 10.0, (4,), np.float64)})
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

        def _obs(self):
            return {"environment_state": np.concatenate([self.target, self.pos])}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = self.np_random.uniform(-1.0, 1.0, 2)
            angle = self.np_random.uniform(0.0, 2 * np.pi)
            self.target = self.pos + self.distance * np.array([np.cos(angle), np.sin(angle)])
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.pos = self.pos - 0.1 * np.asarray(action, np.float64)
            self.t += 1
            gap = float(np.linalg.norm(self.target - self.pos))
            ok = gap < 0.05
            return self._obs(), -gap, ok, self.t >= self._max_episode_steps and not ok, {"is_success": ok}

    @dataclass
    class TargetLast(ObservationProcessorStep):
        def observation(self, observation):
            state = observation["observation.environment_state"]
            return {**observation, "observation.environment_state": torch.cat([state[:, 2:], state[:, :2]], dim=1)}

        def transform_features(self, features):
            return features

    @dataclass
    class FlipAction(PolicyActionProcessorStep):
        def action(self, action):
            return -action

        def transform_features(self, features):
            return features

    @EnvConfig.register_subclass("reach_suites")
    @dataclass
    class ReachSuitesEnv(EnvConfig):
        task: str = "near,far"
        episode_length: int = 30

        @property
        def gym_kwargs(self):
            return {}

        def create_envs(self, n_envs, use_async_envs=False):
            env_cls = _make_vec_env_cls(use_async_envs, n_envs)
            out = {}
            for suite in self.task.split(","):
                for task_id, distance in SUITES[suite].items():
                    fns = [partial(Reach, distance, self.episode_length)] * n_envs
                    vec = _LazyAsyncVectorEnv(fns) if env_cls is gym.vector.AsyncVectorEnv else env_cls(fns)
                    out.setdefault(suite, {})[task_id] = vec
            return out

        def get_env_processors(self):
            return PolicyProcessorPipeline(steps=[TargetLast()]), PolicyProcessorPipeline(steps=[FlipAction()])
    """
)


def test_a_lerobot_06_multi_task_config_through_the_bridge(tmp_path: Path) -> None:
    """A config shaped like 0.6's multi-task benchmarks: its suites are task groups named with
    LeRobot's task ids, its env processors run once each (the steering policy reaches every target),
    its envs' own step limits and descriptions reach the results, and lockstep and continuous runs,
    in one process and in 1 or 2 workers, give the same episodes. Each run is a process of its own:
    the plugin reaches its workers through PYTHONPATH, as an installed one would."""
    from lerobot.envs.configs import EnvConfig

    if not hasattr(EnvConfig, "create_envs"):
        pytest.skip("LeRobot < 0.5: make_env does not call an env config's own create_envs")
    site = tmp_path / "site"
    (site / "lerobot_env_reach_suites").mkdir(parents=True)
    (site / "lerobot_env_reach_suites" / "__init__.py").write_text(REACH_SUITES)
    (site / "lerobot_env_reach_suites-0.1.dist-info").mkdir()
    (site / "lerobot_env_reach_suites-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lerobot-env-reach-suites\nVersion: 0.1\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), subprocess_env()["PYTHONPATH"]]), "ROLLBENCH_PLUGINS": "steer_policy"}
    flags = ["eval", "--env.type=lerobot", "--env.name=reach_suites", "--env.task=near,far", "--env.episode_length=20",
             "--policy.type=steer", "--eval.n_episodes=3", f"--seed={SEED}", "--eval.report=false"]
    runners = {"lockstep": ("--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=2"),
               "lockstep-2-workers": ("--eval.mode=lockstep", "--workers=2"),
               "continuous-1-worker": ("--eval.mode=continuous", "--workers=1"),
               "continuous-2-workers": ("--eval.mode=continuous", "--workers=2")}
    runs = {}
    for name, how in runners.items():
        res = run_subprocess(*flags, *how, f"--output_dir={tmp_path / name}", **env)
        assert res.rc == 0, (name, res.err[-3000:])
        runs[name] = per_episode(tmp_path / name)
    tasks = {(t["task_group"], t["task"], t["task_id"]): t["description"] for t in load_info(tmp_path / "lockstep")["per_task"]}
    assert tasks == {("near", "near/0", 0): "reach a target 0.3 away", ("near", "near/3", 1): "reach a target 0.6 away",
                     ("far", "far/1", 0): "reach a target 1.2 away"}
    expected = runs["lockstep"]
    assert len(expected) == 9 and all(v[0] for v in expected.values()), "every target reached"
    assert all(v[3] < 20 for v in expected.values()) and len({v[3] for v in expected.values()}) > 1
    for name, got in runs.items():
        assert got == expected, name


@pytest.mark.libero
def test_libero_plus_over_hf_libero_is_refused_in_one_line(tmp_path: Path) -> None:
    """0.6's libero_plus imports the `libero` package; where that is hf-libero's LIBERO, its
    episodes would be plain LIBERO reported as libero_plus (LeRobot's own factory does so):
    refused in one line, before any output (docs/lerobot_envs.md)."""
    from lerobot.envs.configs import EnvConfig

    if "libero_plus" not in EnvConfig.get_known_choices() or importlib.util.find_spec("libero") is None:
        pytest.skip("needs LeRobot 0.6's libero_plus and hf-libero")
    res = run_subprocess("eval", "--env.type=lerobot", "--env.name=libero_plus", "--policy.type=random",
                         f"--output_dir={tmp_path / 'o'}", timeout=300)
    assert res.rc == 2, res.err
    assert res.err.strip().splitlines() == [res.err.strip()], res.err
    assert "the installed `libero` package is hf-libero's LIBERO, not LIBERO-plus" in res.err
    assert not (tmp_path / "o").exists()


@pytest.mark.pusht
def test_a_recorded_bridge_run_writes_lerobots_fps(cli, tmp_path: Path) -> None:
    """--eval.recording through the bridge: the dataset's fps is LeRobot's env config's (the
    bridge's `fps` is a property of the instance, not a number on the class), and one env's
    observations are stored as one env's (LeRobot's vector env keeps a batch axis of 1): the
    camera as video frames, the state as a vector."""
    pytest.importorskip("gym_pusht")
    import json

    from lerobot.envs.configs import PushtEnv

    res = cli("eval", "--env.type=lerobot", "--env.name=pusht", "--policy.type=random", "--eval.n_episodes=2",
              "--env.episode_length=8", "--eval.recording=true", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    meta = json.loads((tmp_path / "dataset" / "meta" / "info.json").read_text())
    assert meta["fps"] == PushtEnv().fps and meta["total_episodes"] == 2
    features = meta["features"]
    assert features["observation.image"]["dtype"] == "video"
    assert list(features["observation.image"]["shape"]) == [96, 96, 3]
    assert list(features["observation.state"]["shape"]) == [2]
