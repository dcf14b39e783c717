"""lerobot-eval's command lines, `rollbench` in front: each parses with the same meaning."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from rollbench.cli import parse_flags
from rollbench.config.codec import config_from_flags

# as LeRobot's docs and model cards give them (the checkpoint a local directory here: no hub)
LINES = {
    "pusht": "--policy.path={ckpt} --env.type=pusht --eval.batch_size=10 --eval.n_episodes=10 "
             "--policy.use_amp=false --policy.device=cuda",
    "aloha": "--policy.path={ckpt} --env.type=aloha --env.task=AlohaTransferCube-v0 --eval.n_episodes=50 "
             "--eval.batch_size=50 --output_dir=outputs/eval/act --job_name=act_aloha --seed=1000 --policy.device=cpu",
    "metaworld": "--policy.path={ckpt} --env.type=metaworld --env.task=assembly-v3,dial-turn-v3,handle-press-side-v3 "
                 "--eval.batch_size=1 --eval.n_episodes=2",
    "libero": "--policy.path={ckpt} --env.type=libero --env.task=libero_object --eval.batch_size=2 --eval.n_episodes=3",
    "libero-pi0": "--policy.path={ckpt} --env.type=libero --env.task=libero_spatial,libero_object "
                  "--eval.batch_size=1 --eval.n_episodes=10 --eval.use_async_envs=true --policy.n_action_steps=10 "
                  "--rename_map='{\"observation.images.image\": \"observation.images.base_0_rgb\", "
                  "\"observation.images.image2\": \"observation.images.left_wrist_0_rgb\"}'",
}


@pytest.mark.parametrize("name", sorted(LINES))
def test_lerobot_eval_command_lines_parse_with_their_meaning(tmp_path: Path, name: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    flags, positional = parse_flags(shlex.split(LINES[name].replace("{ckpt}", str(ckpt))))
    assert not positional
    cfg = config_from_flags(flags)
    assert cfg.policy.type == "lerobot" and cfg.policy.path == str(ckpt)  # no --policy.type needed
    assert cfg.env.type_name == flags["env.type"]
    assert cfg.eval.n_episodes == int(flags["eval.n_episodes"])
    assert cfg.eval.batch_size == int(flags["eval.batch_size"])  # envs per lockstep batch, as there
    if "env.task" in flags:
        assert cfg.env.task == flags["env.task"]
    if name == "pusht":
        assert cfg.policy.device == "cuda" and cfg.policy.use_amp is False
    if name == "aloha":
        assert cfg.output_dir == "outputs/eval/act" and cfg.job_name == "act_aloha" and cfg.seed == 1000
    if name == "libero-pi0":
        assert cfg.eval.use_async_envs is True
        assert cfg.policy.options == {"n_action_steps": "10"}  # passed to the checkpoint's config
        assert cfg.policy.renames() == {"observation.images.image": "observation.images.base_0_rgb",
                                        "observation.images.image2": "observation.images.left_wrist_0_rgb"}
        assert "rename_map" in str(cfg.identity())  # it changes what the policy sees: part of the identity


def test_job_name_names_the_default_output_dir() -> None:
    flags, _ = parse_flags(["--env.type=fake", "--policy.type=random", "--job_name=my_eval"])
    assert Path(config_from_flags(flags).output_dir).name.endswith("_my_eval")


def test_rename_map_renames_what_the_policy_sees(cli, tmp_path: Path) -> None:
    """A policy that only knows `observation.pos` runs once --rename_map maps the env's key to it."""
    base = ["eval", "--env.type=fake", "--eval.n_episodes=2", "--policy.type=module",
            "--policy.path=helpers_policies:needs_renamed_state"]
    bad = cli(*base, f"--output_dir={tmp_path / 'a'}")
    assert bad.rc == 1 and "observation.pos" in bad.err
    good = cli(*base, '--rename_map={"observation.environment_state": "observation.pos"}', f"--output_dir={tmp_path / 'b'}")
    assert good.rc == 0, good.err
    bad = cli(*base, "--rename_map=oops", f"--output_dir={tmp_path / 'c'}")
    assert bad.rc == 2 and "--rename_map='oops' is not JSON" in bad.err
