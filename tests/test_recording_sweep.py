"""`--eval.perturb` with `--eval.recording`: every condition's episodes in the one LeRobot
dataset, each frame naming its condition, its `task` the instruction the policy was given, its
observation as the sensors gave it (state.noise and image.* applied) and its action as the env
executed it (after action.noise); meta/rollbench_episodes.json maps each dataset episode to
the run's. Shards join into the one dataset, and lerobot-train trains on it. Both LeRobot
lines (`make test` runs this module with 0.4.4 and with 0.6.x)."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import load_info, run_subprocess, subprocess_env
from test_recording import load, random_actions

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

PARAPHRASES = {"near": ["go to the close target"]}
SWEEP = ("eval", "--env.type=fake", "--env.task=near", "--policy.type=random", "--eval.n_episodes=1",
         "--eval.recording=true", "--eval.report=false", f"--eval.paraphrases={json.dumps(PARAPHRASES)}",
         "--eval.perturb=state.noise=0.5;action.noise=0.3;language.drop=1;language.paraphrase=1")
CONDITIONS = ("", "state.noise=0.5", "action.noise=0.3", "language.drop=1", "language.paraphrase=1")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded sweep run in two shards (--executor=shards): each writes its episodes' parts,
    the launcher joins them into the one dataset."""
    out = tmp_path_factory.mktemp("sweep")
    res = run_subprocess(*SWEEP, "--eval.num_shards=2", "--executor=shards", f"--output_dir={out}")
    assert res.rc == 0, res.err
    return out


def draws(seed: int, cid: str, axis: str, n: int, shape: tuple[int, ...], sd: float) -> np.ndarray:
    """The Gaussian draws of `axis` at steps 0..n-1 of the episode with `seed` under `cid`
    (docs/robustness.md: a generator per (seed, condition, axis, step))."""
    return np.stack([np.random.default_rng([seed, zlib.crc32(cid.encode()), zlib.crc32(axis.encode()), t])
                     .normal(0.0, sd, shape) for t in range(n)])


def test_every_condition_s_episodes_are_in_the_dataset_each_naming_its_condition(sweep: Path) -> None:
    """Checked value by value against what the random policy sends and the axes draw, so the
    shards' joined dataset is the one a single process would write."""
    ds, columns = load(sweep)
    mapping = json.loads((Path(ds.root) / "meta" / "rollbench_episodes.json").read_text())["episodes"]
    # plan order: condition c's (only) episode is the run's episode c
    assert [(e["condition"], e["episode_index_in_run"]) for e in mapping] == [(c, i) for i, c in enumerate(CONDITIONS)]
    instruction = {"": "reach a near target", "state.noise=0.5": "reach a near target",
                   "action.noise=0.3": "reach a near target", "language.drop=1": "", "language.paraphrase=1":
                   "go to the close target"}
    control: dict[int, dict[str, np.ndarray]] = {}
    for e in mapping:
        rows = columns["episode_index"] == e["episode_index"]
        cid, seed = e["condition"], e["seed"]
        assert set(columns["condition"][rows].ravel().tolist()) == {cid}
        assert set(columns["episode_seed"][rows].ravel().tolist()) == {seed}
        assert e["task"] == "near" and e["instruction"] == instruction[cid]
        first = int(np.flatnonzero(rows)[0])
        assert ds[first]["task"] == instruction[cid]  # the instruction the policy got, per frame
        got = {k: columns[k][rows] for k in ("observation.state", "action")}
        n = len(got["action"])
        policy = random_actions(seed, n)  # the random policy's actions: its own generator, blind to the condition
        if not cid:
            control[seed] = got
            np.testing.assert_array_equal(got["action"], policy)
        elif cid == "action.noise=0.3":  # the env executed the noisy action, and that is what is recorded
            executed = np.clip(policy + draws(seed, cid, "action.noise", n, (2,), 0.3), -1, 1).astype(np.float32)
            np.testing.assert_allclose(got["action"], executed, atol=1e-6)
        else:
            np.testing.assert_array_equal(got["action"], policy)
    for e in mapping:  # the same actions, the same trajectory: a perturbed state is the control's plus the sensor's noise
        rows = columns["episode_index"] == e["episode_index"]
        state, seed = columns["observation.state"][rows], e["seed"]
        if e["condition"] == "state.noise=0.5":
            want = control[seed]["observation.state"] + draws(seed, e["condition"], "state.noise", len(state), (2,), 0.5)
            np.testing.assert_allclose(state, want, atol=1e-5)
            assert not np.allclose(state, control[seed]["observation.state"])
        elif e["condition"] in ("language.drop=1", "language.paraphrase=1"):
            np.testing.assert_array_equal(state, control[seed]["observation.state"])


def test_lerobot_train_trains_on_a_recorded_sweep(sweep: Path, tmp_path: Path) -> None:
    """Two steps of a tiny ACT: the extra columns (condition, a string; the seed and index) are
    not the policy's, the empty instruction of language.drop is a task like any other."""
    info: dict[str, Any] = json.loads((sweep / "eval_info.json").read_text())["dataset"]
    tiny = ("--policy.dim_model=16", "--policy.dim_feedforward=32", "--policy.n_heads=2", "--policy.chunk_size=4",
            "--policy.n_action_steps=4", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
            "--policy.use_vae=false")
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot.scripts.lerobot_train", f"--dataset.repo_id={info['repo_id']}",
         f"--dataset.root={info['root']}", "--policy.type=act", "--policy.push_to_hub=false", "--policy.device=cpu",
         *tiny, "--steps=2", "--batch_size=4", "--num_workers=0", "--save_checkpoint=false", "--log_freq=1",
         "--wandb.enable=false", f"--output_dir={tmp_path / 'train'}"],
        capture_output=True, text=True, timeout=300, env=subprocess_env(HF_HUB_OFFLINE="1"), stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step:2 " in proc.stdout + proc.stderr and "End of training" in proc.stdout + proc.stderr


def test_an_image_axis_is_recorded_as_the_camera_gave_it(tmp_path: Path) -> None:
    """image.brightness=0.5 on PushT's pixels, in lockstep batches in this process: the random
    policy ignores them, so the episode is the control's, and its recorded frames are the
    control's at half brightness (what the policy saw: a degraded camera is what the camera
    gives)."""
    import av

    res = run_subprocess("eval", "--env.type=pusht", "--env.obs_type=pixels_agent_pos", "--policy.type=random",
                         "--eval.n_episodes=1", "--env.episode_length=6", "--eval.perturb=image.brightness=0.5",
                         "--eval.mode=lockstep", "--eval.isolation=none",
                         "--eval.recording=true", "--eval.report=false", "--eval.max_episodes_rendered=0",
                         f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    ds, columns = load(tmp_path)
    assert ds.meta.total_episodes == 2
    assert [set(columns["condition"][columns["episode_index"] == j].ravel().tolist()) for j in range(2)] == [
        {""}, {"image.brightness=0.5"}]
    videos = sorted(Path(ds.root).glob("videos/observation.image/**/*.mp4"))
    frames = []
    for path in videos:
        with av.open(str(path)) as container:
            frames += [f.to_ndarray(format="rgb24").astype(np.float32) for f in container.decode(video=0)]
    assert len(frames) == 12
    control, dimmed = np.stack(frames[:6]), np.stack(frames[6:])
    assert np.abs(dimmed - control * 0.5).mean() < 3  # the codec's loss, no more
    assert np.abs(dimmed - control).mean() > 30


def test_record_conditions_control_keeps_the_control_s_episodes_only(tmp_path: Path) -> None:
    """A sweep for its numbers and clean data for training: every condition runs, the
    dataset holds the control's episodes (no perturbed frame is kept, no part written)."""
    res = run_subprocess(*SWEEP, "--eval.record_conditions=control", "--eval.mode=lockstep", "--eval.isolation=none",
                         f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    ds, columns = load(tmp_path)
    assert ds.meta.total_episodes == 1 and set(columns["condition"].ravel().tolist()) == {""}
    mapping = json.loads((Path(ds.root) / "meta" / "rollbench_episodes.json").read_text())["episodes"]
    assert [(e["condition"], e["episode_index_in_run"]) for e in mapping] == [("", 0)]
    assert json.loads((tmp_path / "dataset_parts" / "joined.json").read_text())["parts"] == ["near_0_000000"]
    info = load_info(tmp_path)
    assert len(info["per_condition"]) == len(CONDITIONS)  # yet every condition ran
    assert info["dataset"]["record_conditions"] == "control"
