"""Outside benchmarks (`--env.type=hub`, behind --trust_remote_code) and the key-selection processor."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import per_episode

HUB_ENV = textwrap.dedent(
    '''
    import gymnasium as gym
    import numpy as np

    TASKS = ["left", "right"]
    MAX_EPISODE_STEPS = {"left": 6, "right": 9}

    def task_description(task):
        return f"drift {task}"

    class Drift(gym.Env):
        def __init__(self, task):
            self.sign = -1.0 if task == "left" else 1.0
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            self.observation_space = gym.spaces.Dict({
                "joint": gym.spaces.Box(-100, 100, (3,), np.float64),
                "vel": gym.spaces.Box(-100, 100, (2,), np.float64),
                "cam": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            })

        def _obs(self):
            img = np.full((8, 8, 3), int(self.t * 10) % 256, np.uint8)
            return {"joint": np.array([self.x, self.t, self.sign]), "vel": np.array([self.v, -self.v]), "cam": img}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x, self.v, self.t = float(self.np_random.uniform(-1, 1)), 0.0, 0
            return self._obs(), {}

        def step(self, action):
            self.v = float(action[0]) * self.sign
            self.x += 0.1 * self.v
            self.t += 1
            success = abs(self.x) > 1.2
            return self._obs(), float(self.x * self.sign), success, False, {"is_success": success}

    def make_env(task):
        return Drift(task)
    '''
)


@pytest.fixture
def hub_file(tmp_path: Path) -> Path:
    path = tmp_path / "drift_env.py"
    path.write_text(HUB_ENV)
    return path


def test_hub_needs_consent(cli, tmp_path: Path, hub_file: Path) -> None:
    marker = tmp_path / "imported"
    hub_file.write_text(HUB_ENV + f"\nopen({str(marker)!r}, 'w').close()\n")
    r = cli("eval", "--env.type=hub", f"--env.hub_path={hub_file}", "--policy.type=random", f"--output_dir={tmp_path / 'o'}")
    assert r.rc == 2
    assert "--trust_remote_code=true" in r.err and len(r.err.strip().splitlines()) == 1
    assert not marker.exists()  # refused before importing anything


@pytest.mark.parametrize("mode", ["lockstep", "continuous"])
def test_hub_benchmark_runs_with_consent(cli, tmp_path: Path, hub_file: Path, mode: str) -> None:
    r = cli("eval", "--env.type=hub", f"--env.hub_path={hub_file}", "--trust_remote_code=true", "--policy.type=random",
            "--eval.n_episodes=3", f"--eval.mode={mode}", "--workers=2", f"--output_dir={tmp_path / mode}")
    assert r.rc == 0, r.err
    got = per_episode(tmp_path / mode)
    assert {k[0] for k in got} == {"left", "right"} and len(got) == 6
    assert all(v[3] <= (6 if k[0] == "left" else 9) for k, v in got.items())


def test_hub_modes_agree(cli, tmp_path: Path, hub_file: Path) -> None:
    base = ["eval", "--env.type=hub", f"--env.hub_path={hub_file}", "--trust_remote_code=true",
            "--policy.type=module", "--policy.path=helpers_sched:keyed_policy", "--eval.n_episodes=3",
            "--env.state_keys=joint,vel", "--env.camera_keys=cam:front"]
    a = cli(*base, "--eval.mode=lockstep", f"--output_dir={tmp_path / 'a'}")
    b = cli(*base, "--eval.mode=continuous", "--policy.placement=driver", "--workers=2", f"--output_dir={tmp_path / 'b'}")
    assert a.rc == 0 and b.rc == 0, a.err + b.err
    assert per_episode(tmp_path / "a") == per_episode(tmp_path / "b")


def test_key_selection_unknown_key(cli, tmp_path: Path, hub_file: Path) -> None:
    r = cli("eval", "--env.type=hub", f"--env.hub_path={hub_file}", "--trust_remote_code=true", "--policy.type=random",
            "--env.state_keys=joint,nope", "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert r.rc != 0
    assert "--env.state_keys" in r.err and "'nope'" in r.err and "joint" in r.err


def test_hub_errors(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # a hub id, looked up in the (empty) cache only
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    r = cli("eval", "--env.type=hub", "--env.hub_path=someone/some-env", "--trust_remote_code=true",
            "--policy.type=random", f"--output_dir={tmp_path / 'out'}")
    assert r.rc == 2 and "not a local path" in r.err and "not in the cache" in r.err and "hf download" in r.err
    assert not (tmp_path / "out").exists()
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    r = cli("eval", "--env.type=hub", f"--env.hub_path={bad}", "--trust_remote_code=true", "--policy.type=random",
            f"--output_dir={tmp_path / 'o'}")
    assert r.rc == 2 and "make_env" in r.err


def test_key_selection_on_a_builtin(cli, tmp_path: Path) -> None:
    """The processor works on any dict-observation benchmark: fake's two keys, reordered."""
    r = cli("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_sched:state6_policy",
            "--env.state_keys=environment_state,agent_pos", "--eval.n_episodes=2", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    # the policy reads the target from the first part of the state: it reaches it only if the
    # state is (environment_state, agent_pos) in that order (one far episode runs out of steps)
    assert sum(v[0] for v in per_episode(tmp_path).values()) >= 5
    wrong = cli("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_sched:state6_policy",
                "--env.state_keys=agent_pos,environment_state", "--eval.n_episodes=2", f"--output_dir={tmp_path / 'w'}")
    assert wrong.rc == 0, wrong.err
    assert not any(v[0] for v in per_episode(tmp_path / "w").values())
