"""`rollbench check`: a LeRobot checkpoint against a benchmark before any episode, on
checkpoints made with deliberate mistakes; `eval` refuses the same hard mismatches."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht]

PUSHT = ["--env.type=pusht", "--eval.n_episodes=1", "--env.episode_length=5"]


def _features(**changes: tuple[str, tuple[int, ...]] | None) -> dict:
    from lerobot.configs.types import FeatureType, PolicyFeature

    feats = {"observation.state": ("STATE", (2,)), "observation.image": ("VISUAL", (3, 96, 96))}
    for key, value in changes.items():
        feats.pop(key.replace("__", "."), None)
        if value is not None:
            feats[key.replace("__", ".")] = value
    return {k: PolicyFeature(type=FeatureType[t], shape=s) for k, (t, s) in feats.items()}


def _row(out: str, key: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(key + " ") or line.startswith(key + "  "))


def test_a_checkpoint_that_fits_is_all_ok(cli, tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "good", PushTConfig())
    res = cli("check", *PUSHT, f"--policy.path={ckpt}")
    assert res.rc == 0, res.err
    assert "0 mismatches: it fits" in res.out
    assert "ok" in _row(res.out, "observation.image") and "uint8 [" in _row(res.out, "observation.image")
    assert "ok" in _row(res.out, "action")


def test_a_camera_under_another_name_gets_a_rename_map(cli, tmp_path: Path) -> None:
    inputs = _features(observation__image=None, observation__images__top=("VISUAL", (3, 96, 96)))
    ckpt = make_checkpoint(tmp_path / "renamed", PushTConfig(), inputs=inputs)
    res = cli("check", *PUSHT, f"--policy.path={ckpt}")
    assert res.rc == 2
    row = _row(res.out, "observation.images.top")
    assert "hard" in row and "(not produced)" in row
    assert """--rename_map='{"observation.image": "observation.images.top"}'""" in row
    # the fix, applied, fits; and eval refuses without it, with the same words, in one line
    assert cli("check", *PUSHT, f"--policy.path={ckpt}", '--rename_map={"observation.image": "observation.images.top"}').rc == 0
    bad = cli("eval", *PUSHT, f"--policy.path={ckpt}", f"--output_dir={tmp_path / 'out'}")
    assert bad.rc == 2 and "observation.images.top: wants VISUAL[3, 96, 96], env gives (not produced)" in bad.err
    assert not (tmp_path / "out" / "episodes").exists()


def test_a_wrong_state_dimension_and_a_larger_image_are_refused_with_their_sizes(cli, tmp_path: Path) -> None:
    inputs = _features(observation__state=("STATE", (14,)), observation__image=("VISUAL", (3, 384, 384)))
    ckpt = make_checkpoint(tmp_path / "aloha_like", PushTConfig(), inputs=inputs)
    res = cli("check", *PUSHT, f"--policy.path={ckpt}")
    assert res.rc == 2
    state, image = _row(res.out, "observation.state"), _row(res.out, "observation.image")
    assert "STATE[14]" in state and "STATE[2]" in state and "hard" in state and "--env.obs_type" in state
    assert "VISUAL[3, 384, 384]" in image and "VISUAL[3, 96, 96]" in image and "renders 96x96" in image
    assert "2 mismatches" in res.out


def test_missing_normalisation_stats_are_a_hard_mismatch(cli, tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    ckpt = make_checkpoint(tmp_path / "nostats", PushTConfig())
    (stats,) = ckpt.glob("policy_preprocessor_step_*_normalizer_processor.safetensors")
    save_file({k: v for k, v in load_file(str(stats)).items() if not k.startswith("observation.state.")}, str(stats))
    res = cli("check", *PUSHT, f"--policy.path={ckpt}")
    assert res.rc == 2
    row = _row(res.out, "observation.state (stats)")
    assert "missing: observation.state.mean, observation.state.std" in row and "hard" in row


def test_actions_outside_the_env_bounds_are_a_warning(cli, tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "scaled", PushTConfig(), stats={"action": {"min": [-5000.0, -5000.0], "max": [5000.0, 5000.0]}})
    res = cli("check", *PUSHT, f"--policy.path={ckpt}")
    assert res.rc == 0, res.out
    row = _row(res.out, "action (range)")
    assert "soft" in row and "clipped" in row
    assert "1 warnings" in res.out


def test_check_wants_a_lerobot_checkpoint(cli) -> None:
    res = cli("check", "--env.type=fake", "--policy.type=random")
    assert res.rc == 2 and "--policy.type=random has no checkpoint to check" in res.err
