"""Image axes of a robustness sweep (image.noise, .blur, .brightness, .contrast, .occlusion,
.jpeg, .shift): each changes what the policy sees and nothing at rest; rollbench's uint8 HWC
frames and LeRobot's float CHW frames go through the same perturbation; the draws are a
function of (axis and level, episode seed, camera, step), shared by every condition with that
level; a PushT sweep of a LeRobot checkpoint gives the same episodes whatever runs it; a
benchmark without images refuses the axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import run_subprocess
from rollbench import perturb
from rollbench.config.codec import config_from_flags
from rollbench.episode.context import StepContext
from rollbench.plan import plan_for
from test_sweep import every_episode, states_seen

LEVELS = {"image.noise": 0.1, "image.blur": 1.5, "image.brightness": 0.5, "image.contrast": 0.3,
          "image.occlusion": 0.25, "image.jpeg": 10, "image.shift": 0.2}


def frame(seed: int = 0) -> np.ndarray:
    """A frame with structure (a gradient and a bright square), uint8 HWC."""
    y, x = np.mgrid[0:48, 0:64]
    img = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    img[10:20, 30:40] = 250
    return img


def under(spec: str, img: np.ndarray, seed: int = 5, step_to: int = 0, camera: str = "observation.image") -> np.ndarray:
    """`img` as the policy sees it at step `step_to` of an episode under `spec`."""
    p = perturb.Perturber(perturb.parse(spec)[1], seed, None)
    for _ in range(step_to):
        p.advance({camera: img})
    return p.inputs({camera: img})[camera]


@pytest.mark.parametrize("axis", sorted(LEVELS))
def test_each_image_axis_changes_the_frame_the_same_in_both_layouts(axis: str) -> None:
    img = frame()
    spec = f"{axis}={LEVELS[axis]}"
    out = under(spec, img)
    assert out.dtype == np.uint8 and out.shape == img.shape
    assert np.abs(out.astype(int) - img).mean() > 2, "the perturbation shows"
    # LeRobot's layout (float CHW in [0, 1]): the same picture, as floats, in that layout
    chw = img.transpose(2, 0, 1).astype(np.float32) / 255
    got = under(spec, chw)
    assert got.dtype == np.float32 and got.shape == chw.shape and got.min() >= 0 and got.max() <= 1
    tolerance = 3 if axis == "image.jpeg" else 1  # JPEG rounds its input to bytes; a float frame is not
    assert np.abs(got.transpose(1, 2, 0) * 255 - out).max() <= tolerance
    # the draws: the same episode sees the same; another episode or another camera its own
    assert np.array_equal(under(spec, img), out)
    drawn = axis in ("image.noise", "image.shift", "image.occlusion")
    assert np.array_equal(under(spec, img, seed=6), out) != drawn
    assert np.array_equal(under(spec, img, camera="observation.images.wrist"), out) != drawn
    # noise is drawn each step; a shift or a patch stays where it is for the whole episode
    assert np.array_equal(under(spec, img, step_to=3), out) != (axis == "image.noise")


@pytest.mark.parametrize("axis", ["image.noise", "image.shift", "image.occlusion"])
def test_conditions_that_share_an_image_level_share_its_draws(axis: str) -> None:
    """Common random numbers: a drawn image axis at one level draws the same (noise, a shift's
    direction, a patch's place) under every condition that has that level, whatever else the
    condition sets; another level draws its own."""
    img, spec = frame(), f"{axis}={LEVELS[axis]}"
    for other in ("language.drop=1", "action.noise=1&state.noise=0.2", "action.latency=1"):
        for step in (0, 3):
            assert np.array_equal(under(f"{spec}&{other}", img, step_to=step), under(spec, img, step_to=step)), other
    for camera in ("observation.image", "observation.images.wrist"):
        assert np.array_equal(under(f"{spec}&language.drop=1", img, camera=camera), under(spec, img, camera=camera))
    assert np.array_equal(perturb.preview(f"{spec}&action.noise=1", img, 5), perturb.preview(spec, img, 5))


def test_crossed_image_axes_are_each_axis_s_own_draws_in_turn() -> None:
    """A crossed image condition is its axes applied one after another, each with the draws it
    has alone: the shift of `image.shift=0.2` then the noise (or the patch) of the other's
    condition (shift moves whole pixels, so the first step is exact in uint8)."""
    img = frame()
    shifted = under("image.shift=0.2", img)
    for step in (0, 2):
        assert np.array_equal(under("image.shift=0.2&image.noise=0.1", img, step_to=step),
                              under("image.noise=0.1", under("image.shift=0.2", img, step_to=step), step_to=step))
    assert np.array_equal(under("image.shift=0.2&image.occlusion=0.25", img), under("image.occlusion=0.25", shifted))
    assert not np.array_equal(under("image.shift=0.3", img) == 0, shifted == 0)


def test_a_level_at_rest_is_the_control_and_shapes_without_channels_pass() -> None:
    assert perturb.parse("image.brightness=1;image.jpeg=0;image.blur=0") == [perturb.CONTROL]
    grey = frame()[:, :, 0]
    out = under("image.occlusion=0.5", grey)
    assert out.shape == grey.shape and (out == 128).sum() >= 0.5 * grey.size * 0.9
    shifted = under("image.shift=0.5", frame())
    assert (shifted == 0).all(axis=-1).mean() > 0.3, "what the moved frame left is black"
    assert perturb.preview("", frame(), 5) is not None and np.array_equal(perturb.preview("", frame(), 5), frame())
    assert np.array_equal(perturb.preview("image.shift=0.5", frame(), 5), shifted)


def test_the_policy_sees_the_perturbed_frame_late_under_latency() -> None:
    """Under latency the policy sees the state of k steps before."""
    assert states_seen("action.latency=2", [0.0, 1.0, 2.0, 3.0]) == [0, 0, 0, 1]


@pytest.fixture(scope="module")
def pusht_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gym_pusht")
    pytest.importorskip("lerobot")
    from lerobot_helpers import make_checkpoint
    from rollbench.benchmarks.pusht import PushTConfig

    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "act", PushTConfig(obs_type="pixels_agent_pos"))


PUSHT_SWEEP = "--eval.perturb=image.noise=0.2;image.occlusion=0.3;image.jpeg=5;image.shift=0.25;image.blur=2"


@pytest.mark.pusht
@pytest.mark.lerobot
def test_a_pusht_image_sweep_of_a_lerobot_checkpoint_does_not_depend_on_what_runs_it(tmp_path: Path, pusht_act: Path) -> None:
    base = ("eval", "--env.type=pusht", "--env.obs_type=pixels_agent_pos", f"--policy.path={pusht_act}",
            "--eval.n_episodes=2", "--env.episode_length=8", PUSHT_SWEEP)
    got = {}
    for name, flags in {"workers": ("--workers=2", "--eval.max_episodes_rendered=1", "--eval.report=true"),
                        "lockstep": ("--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=3",
                                     "--eval.report=false", "--eval.max_episodes_rendered=0")}.items():
        res = run_subprocess(*base, *flags, f"--output_dir={tmp_path / name}", timeout=300)
        assert res.rc == 0, res.err
        got[name] = every_episode(tmp_path / name)
    assert got["workers"] == got["lockstep"]
    # the report's stills: each image condition's filmed frame as its camera sees it
    page = (tmp_path / "workers" / "report.html").read_text()
    for axis in ("image.noise", "image.occlusion", "image.jpeg", "image.shift", "image.blur"):
        assert f"the filmed frame as the policy's camera sees it under {axis}" in page
    assert {v[0] for v in got["workers"].values()} == {"", *(c.id for c in perturb.parse(PUSHT_SWEEP.split("=", 1)[1])[1:])}


@pytest.mark.pusht
@pytest.mark.lerobot
def test_the_checkpoint_acts_on_the_perturbed_frame(pusht_act: Path) -> None:
    """Each condition's first action differs from the control's on the same reset frame (the
    checkpoint sees the perturbation), the same for both calls of a condition."""
    cfg = config_from_flags({"env.type": "pusht", "env.obs_type": "pixels_agent_pos", "policy.path": str(pusht_act),
                             "eval.n_episodes": "1", "eval.perturb": PUSHT_SWEEP.split("=", 1)[1], "output_dir": "/nonexistent"})
    ctx = StepContext(cfg.env, cfg.policy, cfg.seed)
    policy = ctx.make_policy()
    env = cfg.env.make_task_env("PushT-v0")
    first: dict[str, np.ndarray] = {}
    try:
        for unit in plan_for(cfg):
            obs, _ = env.reset(seed=unit.seed)
            for _ in range(2):
                ctx.reset(policy, [0], [ctx.episode_start(unit)])
                action = ctx.act(policy, {k: v[None] for k, v in obs.items()}, [0], ["x"])[0]
                assert np.array_equal(first.setdefault(unit.condition, action), action), unit.condition
    finally:
        env.close()
        policy.close()
    assert len(first) == 6
    assert all(not np.array_equal(first[c], first[""]) for c in first if c), first


def test_an_image_axis_without_images_is_refused_before_any_episode(tmp_path: Path) -> None:
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", "--eval.perturb=image.blur=2",
                         f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2, res.err
    assert "image.blur acts on a camera image (observation.image, observation.images.*), which --env.type=fake does not give" in res.err
    assert res.err.strip().splitlines() == [res.err.strip()]
    assert not (tmp_path / "o").exists()
