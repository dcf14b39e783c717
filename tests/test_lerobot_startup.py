"""Start-up of a LeRobot checkpoint: only its type's modules, the weights on a thread while
the env workers start, the moments in eval_info.json, and load errors still one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from conftest import TESTS, load_info, run_subprocess, subprocess_env
from lerobot_helpers import make_checkpoint

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht]


@pytest.fixture(scope="module")
def act_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gym_pusht")
    from rollbench.benchmarks.pusht import PushTConfig

    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "act", PushTConfig(obs_type="environment_state_agent_pos"))


# run in a fresh interpreter: what a checkpoint imports is a fact of a process's first load
PROBE = """
import json, sys
import numpy as np
from rollbench.benchmarks.pusht import PushTConfig
from rollbench.config.policy import PolicyConfig
from rollbench.policies.base import EpisodeStart, PolicyContext
from rollbench.policies.lerobot import LeRobotPolicy

bench = PushTConfig(obs_type="environment_state_agent_pos")
env = bench.make_task_env(bench.tasks()["pusht"][0])
policy = LeRobotPolicy(PolicyContext(PolicyConfig(type="lerobot", path=sys.argv[1]), bench, env.action_space))
policy.reset([0], [EpisodeStart("pusht", "pusht", "", 0, 7)])
obs, _ = env.reset(seed=7)
batch = bench.to_features({k: np.asarray(v)[None] for k, v in obs.items()})
action = policy.act({**batch, "task": [""]}, [0])
before = sorted(m for m in sys.modules if m.startswith("lerobot.policies.") and m.count(".") == 2)
from lerobot.policies import ACTConfig, GrootConfig  # the package's own __init__ runs now
print(json.dumps({"shape": list(action.shape), "before": before, "act": ACTConfig.__name__,
                  "groot": "lerobot.policies.groot" in sys.modules}))
"""


def test_an_act_checkpoint_imports_only_act(act_ckpt: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(act_ckpt)], capture_output=True, text=True, timeout=300,
                          env=subprocess_env(PYTHONPATH=str(TESTS)), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["shape"] == [1, 2]
    # not every policy type's config (lerobot.policies' __init__ imports GR00T's, with torchvision and transformers)
    assert got["before"] == ["lerobot.policies.act", "lerobot.policies.pretrained", "lerobot.policies.utils"] or \
        "lerobot.policies.groot" not in got["before"], got["before"]
    assert got["act"] == "ACTConfig" and got["groot"], "reading the package's names runs its __init__"


@pytest.mark.parametrize("mode", ["continuous", "lockstep"])
def test_startup_moments_in_eval_info(act_ckpt: Path, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "run"
    res = run_subprocess("eval", "--env.type=pusht", "--env.obs_type=environment_state_agent_pos", f"--policy.path={act_ckpt}",
                         "--eval.n_episodes=2", "--env.episode_length=5", f"--eval.mode={mode}", "--workers=2",
                         "--eval.report=false", f"--output_dir={out}")
    assert res.rc == 0, res.err[-3000:]
    startup = load_info(out)["startup"]
    assert list(startup) == ["lerobot_imported", "policy_checked", "policy_ready", "first_env_step"], startup
    assert 0 < startup["lerobot_imported"] <= startup["policy_checked"] <= startup["policy_ready"] <= startup["first_env_step"] < 120


def test_weights_that_do_not_load_are_one_line(act_ckpt: Path, tmp_path: Path) -> None:
    """The weights load after the flags and features are checked, on a thread: a broken file is
    still refused in one line, exit 2, before any episode."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(act_ckpt, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    out = tmp_path / "run"
    res = run_subprocess("eval", "--env.type=pusht", "--env.obs_type=environment_state_agent_pos", f"--policy.path={bad}",
                         "--eval.n_episodes=2", "--env.episode_length=5", "--workers=1", "--eval.report=false",
                         f"--output_dir={out}")
    assert res.rc == 2, (res.out, res.err[-3000:])
    lines = [ln for ln in res.err.strip().splitlines() if ln.startswith("rollbench:")]
    assert len(lines) == 1 and "cannot load it" in lines[0] and str(bad) in lines[0], res.err[-3000:]
    assert "Traceback" not in res.err
    assert not (out / "episodes").exists() or not any((out / "episodes").rglob("*.jsonl*")) or \
        all(p.stat().st_size == 0 for p in (out / "episodes").rglob("*.jsonl*"))
