"""LeRobot 0.6's new policy types through rollbench, tiny and offline (issue 37).

Each type that can be built tiny and offline is a random-init checkpoint from its builder in
tests/ (its backbones and tokenizers in local directories beside it), run by rollbench from a
hub id (the checkpoint copied into a hand-built hub cache, which resolves to that snapshot
directory) and by `lerobot-eval` 0.6 from its directory, compared action for action, and
checked by `rollbench check`. docs/lerobot.md lists every 0.6 type with the test that runs it
or why none does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

from rollbench.benchmarks.pusht import PushTConfig
from rollbench.lerobot_line import before_0_5
from test_hub_checkpoints import put_in_cache
from test_lerobot_vla import assert_equals_lerobot_eval, check, edited

pytestmark = [
    pytest.mark.lerobot,
    pytest.mark.pusht,
    pytest.mark.skipif(before_0_5(), reason="LeRobot 0.4.4 lacks these types but pi0_fast, whose tiny build "
                       "would need openpi's transformers there as pi0's does (not run on 0.4.4)"),
]

TYPES = ["pi0_fast", "multi_task_dit", "eo1", "vla_jepa", "gaussian_actor"]


def build(ptype: str, out: Path) -> Path:
    """A tiny `ptype` checkpoint for PushT pixels in `out`."""
    if ptype == "pi0_fast":
        from vla_pi0_fast import make_pi0_fast_checkpoint

        return make_pi0_fast_checkpoint(out, PushTConfig())
    if ptype == "multi_task_dit":
        from vla_dit import make_multi_task_dit_checkpoint

        return make_multi_task_dit_checkpoint(out, PushTConfig())
    if ptype == "eo1":
        from vla_eo1 import make_eo1_checkpoint

        return make_eo1_checkpoint(out, PushTConfig())
    if ptype == "vla_jepa":
        from vla_jepa import make_vla_jepa_checkpoint

        return make_vla_jepa_checkpoint(out, PushTConfig())
    if ptype == "gaussian_actor":  # SAC's actor: no backbone to load; a small CNN and 32-wide MLPs
        from lerobot_helpers import make_checkpoint

        return make_checkpoint(out, PushTConfig(), policy_type=ptype, latent_dim=32, state_encoder_hidden_dim=32)
    raise ValueError(ptype)


#: what every process that loads a type needs: pi0-FAST's PaliGemma is shrunk by the patch of
#: tests/vla_pi0.py, which the recording sitecustomize installs (TINY_PI0)
ENV = {"pi0_fast": {"TINY_PI0": "1"}}


@pytest.fixture(scope="module", params=TYPES)
def ckpt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(request.param, tmp_path_factory.mktemp("types06") / request.param)


@pytest.mark.slow
def test_from_a_hub_id_lockstep_equals_lerobot_eval(ckpt: Path, tmp_path: Path) -> None:
    """`rollbench eval --policy.seeding=lerobot-eval --policy.path=ORG/NAME` (offline, the hub
    cache built by hand) and lerobot-eval 0.6 on the checkpoint's directory, both at batch 2:
    every action of every episode, then every episode's results."""
    cache = tmp_path / "hub"
    repo = f"rollbench-test/{ckpt.name}"
    put_in_cache(cache, repo, "c" * 40, ckpt)
    assert_equals_lerobot_eval(ckpt, tmp_path, ours=repo, HF_HUB_CACHE=str(cache), **ENV.get(ckpt.name, {}))


#: the config fields naming a model each type loads when it is built (`rollbench check` rows)
SOURCES = {
    "pi0_fast": ["text_tokenizer_name", "action_tokenizer_name"],
    "multi_task_dit": ["vision_encoder_name", "text_encoder_name"],
    "eo1": ["vlm_base"],
    "vla_jepa": ["qwen_model_name"],  # (its V-JEPA 2, `jepa_encoder_name`, is for training: not loaded here)
    "gaussian_actor": [],
}


def test_check_passes(ckpt: Path, tmp_path: Path) -> None:
    """`rollbench check` on PushT pixels fits; each model the policy loads by name (pi0-FAST's
    tokenizers, Multi-Task DiT's CLIP, EO-1's processor, VLA-JEPA's Qwen3-VL) is found where its config says, and is a hard row once
    that directory is gone."""
    rc, rows, text = check(ckpt)
    assert rc == 0, text
    assert all(status != "hard" for status, _ in rows.values()), text
    fields = SOURCES[ckpt.name]
    assert [key for key in rows if key.endswith(" (config)")] == [f"{field} (config)" for field in fields], text
    assert all(rows[f"{field} (config)"][0] == "ok" for field in fields), text
    for field in fields:
        moved = edited(ckpt, tmp_path / field, **{field: "/nonexistent/model"})
        rc, rows, text = check(moved)
        assert rc == 2 and rows[f"{field} (config)"][0] == "hard", text
