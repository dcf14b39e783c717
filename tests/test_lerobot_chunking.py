"""Per-slot episode state for chunked LeRobot policies other than ACT (Diffusion, SmolVLA,
GR00T, X-VLA; on LeRobot 0.6 also Multi-Task DiT, EO-1, VLA-JEPA, pi0-FAST).

A type leaves lockstep only once its per-slot path is checked here episode for episode
against its own `select_action` at one row per call (docs/lerobot.md lists the others).
Checkpoints are tiny random-init policies saved by the test (tests/lerobot_helpers.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

from conftest import load_info, per_episode, run_subprocess
from lerobot_helpers import make_adapter, make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig
from rollbench.policies.base import EpisodeStart
from rollbench.policies.lerobot import batch_seed, to_policy_batch

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht]

LENGTH = 30


@pytest.fixture(scope="module")
def diffusion_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # n_obs_steps 2, horizon 8, n_action_steps 4 (lerobot_helpers): the history matters and
    # chunks end every 4 steps; DDPM draws noise at every sampler step
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "diffusion", PushTConfig(), policy_type="diffusion")


def _adapter(ckpt: Path):
    return make_adapter(ckpt, PushTConfig(episode_length=LENGTH))


def _batch(n: int, rng: np.random.Generator) -> dict:
    return {
        "observation.image": rng.integers(0, 256, (n, 96, 96, 3), dtype=np.uint8),
        "observation.state": rng.uniform(0, 512, (n, 2)),
        "task": ["push"] * n,
    }


def _row(batch: dict, i: int) -> dict:
    return {k: _row(v, i) if isinstance(v, dict) else v[i : i + 1] for k, v in batch.items()}


def _start(slot: int, seed: int) -> EpisodeStart:
    return EpisodeStart("pusht", "PushT-v0", "push", slot, seed)


def _select_action(policy, seed: int, batches: list[dict]) -> np.ndarray:
    """LeRobot's own loop for one episode: reset, seed torch as lockstep does, select_action per
    step (between the env processors and the checkpoint's processors, as lerobot-eval runs it)."""
    import torch

    ref = copy.copy(policy.policy)
    ref.reset()
    torch.manual_seed(batch_seed([seed]))
    out = []
    with torch.inference_mode():
        for b in batches:
            inputs = to_policy_batch(b)
            if policy.env_pre is not None:
                inputs = policy.env_pre(inputs)
            action = policy.postprocessor(ref.select_action(policy.preprocessor(inputs)))
            if policy.env_post is not None:
                action = policy.env_post({"action": action})["action"]
            out.append(action.numpy())
    return np.concatenate(out)


#: each type's case fixture gives (adapter, batch maker, adapter path): Diffusion's history of
#: observations (Multi-Task DiT's too, with its noise drawn per row around the call); EO-1's chunk
#: queue with its `torch.normal` noise drawn per row around the call (VLA-JEPA's: `torch.randn`); SmolVLA's chunk queue with each chunk's flow-matching noise passed as
#: `noise=`; GR00T's and X-VLA's chunk queues with their noise drawn per row around the call
#: (GR00T's queue the tail of its chunk, X-VLA's through its own LIBERO env processors)
CASES = pytest.mark.parametrize("case", ["diffusion", "smolvla", "groot", "xvla", "multi_task_dit", "eo1", "vla_jepa"])
#: and pi0-FAST's chunk queue: greedy decoding, no noise (its batched rows: `test_greedy_rows_...`)
ONE_ROW_CASES = pytest.mark.parametrize(
    "case", ["diffusion", "smolvla", "groot", "xvla", "multi_task_dit", "eo1", "vla_jepa", "pi0_fast"],
)
#: the types with whole runs below (GR00T's: tests/test_lerobot_vla.py; X-VLA's: LIBERO,
#: tests/test_lerobot_env_parity.py)
TYPES = pytest.mark.parametrize(("ckpt_fixture", "path"), [("diffusion_ckpt", "history"), ("smolvla_ckpt", "chunk")])

Case = tuple[Any, Any, str]


@pytest.fixture(scope="module")
def diffusion_case(diffusion_ckpt: Path) -> Case:
    return _adapter(diffusion_ckpt), _batch, "history"


@pytest.fixture(scope="module")
def smolvla_case(smolvla_ckpt: Path) -> Case:
    return _adapter(smolvla_ckpt), _batch, "chunk"


@pytest.fixture(scope="module")
def multi_task_dit_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """A tiny Multi-Task DiT (LeRobot 0.5+): 2 observations of history, chunks of 4, DDPM."""
    from rollbench.lerobot_line import before_0_5

    if before_0_5():
        pytest.skip("LeRobot 0.4.4 has no multi_task_dit (0.5 added it)")
    from vla_dit import make_multi_task_dit_checkpoint

    return _adapter(make_multi_task_dit_checkpoint(tmp_path_factory.mktemp("vla") / "dit", PushTConfig())), _batch, "history"


@pytest.fixture(scope="module")
def eo1_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """A tiny EO-1 (LeRobot 0.6): a one-layer Qwen2.5-VL, chunks of 8 of which 4 are played."""
    from rollbench.lerobot_line import before_0_5

    if before_0_5():
        pytest.skip("LeRobot 0.4.4 has no eo1 (0.6 added it)")
    from vla_eo1 import make_eo1_checkpoint

    return _adapter(make_eo1_checkpoint(tmp_path_factory.mktemp("vla") / "eo1", PushTConfig())), _batch, "chunk"


@pytest.fixture(scope="module")
def vla_jepa_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """A tiny VLA-JEPA (LeRobot 0.6): a one-layer Qwen3-VL, no world model, chunks of 8 of which 4 are played."""
    from rollbench.lerobot_line import before_0_5

    if before_0_5():
        pytest.skip("LeRobot 0.4.4 has no vla_jepa (0.6 added it)")
    from vla_jepa import make_vla_jepa_checkpoint

    return _adapter(make_vla_jepa_checkpoint(tmp_path_factory.mktemp("vla") / "jepa", PushTConfig())), _batch, "chunk"


@pytest.fixture(scope="module")
def pi0_fast_case(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    """A tiny pi0-FAST (LeRobot 0.6): chunks of 4 decoded greedily, its PaliGemma shrunk by
    tests/vla_pi0.py's patch for the module."""
    from rollbench.lerobot_line import before_0_5

    if before_0_5():
        pytest.skip("pi0-FAST's per-slot path is checked on LeRobot 0.6 (0.4.4's needs openpi's transformers)")
    from vla_pi0 import tiny_pi0
    from vla_pi0_fast import make_pi0_fast_checkpoint

    with tiny_pi0():
        yield _adapter(make_pi0_fast_checkpoint(tmp_path_factory.mktemp("vla") / "fast", PushTConfig())), _batch, "chunk"


def test_greedy_rows_are_their_one_row_actions(pi0_fast_case: Case) -> None:
    """pi0-FAST decodes greedily: two slots in one call each get their one-row actions (up to
    float32 rounding), and different observations give different actions."""
    policy, make_batch, _ = pi0_fast_case
    rng = np.random.default_rng(2)
    batches = [make_batch(2, rng) for _ in range(9)]
    policy.reset([0, 1], [_start(0, 7), _start(1, 8)])
    both = np.stack([policy.act(b, [0, 1]) for b in batches])
    for i, seed in enumerate((7, 8)):
        np.testing.assert_allclose(both[:, i], _select_action(policy, seed, [_row(b, i) for b in batches]),
                                   rtol=1e-5, atol=1e-3)
    assert np.abs(both[:, 0] - both[:, 1]).max() > 1.0


def test_a_sampling_pi0_fast_runs_lockstep(pi0_fast_case: Case) -> None:
    """With `temperature` > 0 pi0-FAST samples its tokens from torch's global RNG for the whole
    batch at once: it stays in lockstep, as lerobot-eval runs it."""
    policy, _, _ = pi0_fast_case
    assert make_adapter(Path(policy.name), PushTConfig(), temperature="0.7").path == "lockstep"


@pytest.fixture(scope="module")
def groot_case(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    """A tiny GR00T on PushT (chunks of 16, the last 8 played); its modules read the Eagle
    assets from `HF_LEROBOT_HOME`, pointed at the test's for the module."""
    pytest.importorskip("peft", reason="GR00T's Eagle backbone imports peft: make install-dev installs it")
    from vla_groot import lerobot_home, make_groot_checkpoint

    home = tmp_path_factory.mktemp("lerobot_home")
    ckpt = make_groot_checkpoint(tmp_path_factory.mktemp("vla") / "groot", PushTConfig(), home)
    with lerobot_home(home):
        yield _adapter(ckpt), _batch, "chunk"


@pytest.fixture(scope="module")
def xvla_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """A tiny X-VLA on LIBERO (chunks of 8, the first 4 played): batches as LIBERO's workers send
    them, through X-VLA's own env processors (its LIBERO step, its 6D rotation -> axis-angle)."""
    from rollbench.benchmarks.libero import ROBOT_STATE, LiberoConfig
    from vla_xvla import make_xvla_libero_checkpoint

    try:
        bench = LiberoConfig(task="libero_spatial", task_ids=("0",), observation_height=32, observation_width=32)
        bench.check_available()
    except Exception as err:
        pytest.skip(f"needs hf-libero and LIBERO assets: {err}")
    ckpt = make_xvla_libero_checkpoint(tmp_path_factory.mktemp("vla") / "xvla", bench, published=False)
    policy = make_adapter(ckpt, bench)
    to_policy, _ = policy.env_processors(bench)

    def libero_batch(n: int, rng: np.random.Generator) -> dict:
        flat: dict[str, Any] = {f"observation.images.{name}": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
                                for name in bench.camera_names}
        for shape, key in ROBOT_STATE.values():
            flat[key] = rng.normal(size=(n, *shape))
        flat["task"] = ["pick up the black bowl"] * n
        return to_policy(flat)

    return policy, libero_batch, "chunk"


@ONE_ROW_CASES
def test_per_slot_equals_select_action_at_one_row_per_call(request: pytest.FixtureRequest, case: str) -> None:
    """At one row per call, bit for bit LeRobot's select_action after
    `torch.manual_seed(batch_seed([seed]))`, across chunk boundaries and a new episode mid-chunk."""
    policy, make_batch, path = request.getfixturevalue(f"{case}_case")
    assert policy.path == path and policy.per_slot_state
    assert policy.steps_per_inference == policy.cfg.n_action_steps in (4, 8)
    rng = np.random.default_rng(0)
    batches = [make_batch(2, rng) for _ in range(11)]  # crosses a chunk boundary (two at 4 steps a chunk)
    policy.reset([3, 5], [_start(3, 70), _start(5, 80)])
    got: dict[int, list[np.ndarray]] = {3: [], 5: []}
    for step, b in enumerate(batches):
        if step == 6:  # slot 5 starts another episode mid-chunk: its history and noise start over
            policy.reset([5], [_start(5, 81)])
        for i, slot in enumerate((3, 5)):
            got[slot].append(policy.act(_row(b, i), [slot]))
    np.testing.assert_array_equal(np.concatenate(got[3]), _select_action(policy, 70, [_row(b, 0) for b in batches]))
    np.testing.assert_array_equal(np.concatenate(got[5][:6]), _select_action(policy, 80, [_row(b, 1) for b in batches[:6]]))
    np.testing.assert_array_equal(np.concatenate(got[5][6:]), _select_action(policy, 81, [_row(b, 1) for b in batches[6:]]))


@CASES
def test_batched_rows_draw_their_own_noise(request: pytest.FixtureRequest, case: str) -> None:
    """Two slots in one call: each row's actions are its one-row actions up to float32
    rounding (torch's CPU kernels are not bitwise batch-invariant), not another draw."""
    policy, make_batch, path = request.getfixturevalue(f"{case}_case")
    rng = np.random.default_rng(1)
    batches = [make_batch(2, rng) for _ in range(9)]
    policy.reset([0, 1], [_start(0, 7), _start(1, 8)])
    both = np.stack([policy.act(b, [0, 1]) for b in batches])
    for i, seed in enumerate((7, 8)):
        ref = _select_action(policy, seed, [_row(b, i) for b in batches])
        np.testing.assert_allclose(both[:, i], ref, rtol=1e-5, atol=1e-3)
    # the same slots with their seeds swapped give other actions: the noise is the episode's
    policy.reset([0, 1], [_start(0, 8), _start(1, 7)])
    swapped = np.stack([policy.act(b, [0, 1]) for b in batches])
    # (SmolVLA's tiny random backbone moves its actions less with the noise than Diffusion's sampler)
    assert np.abs(swapped - both).max() > {"history": 1.0, "chunk": 1e-3}[path]


def _eval(ckpt: Path, out: Path, *extra: str, **env: str):
    return run_subprocess(
        "eval", "--env.type=pusht", f"--env.episode_length={LENGTH}", f"--policy.path={ckpt}",
        "--eval.n_episodes=4", "--seed=1000", f"--output_dir={out}", *extra, OMP_NUM_THREADS="1", **env,
    )


@pytest.mark.slow
@TYPES
def test_runs_continuous_with_the_episodes_of_lockstep_at_batch_one(
    request: pytest.FixtureRequest, tmp_path: Path, ckpt_fixture: str, path: str,
) -> None:
    """Diffusion and SmolVLA are continuous by default; at one row per call their episodes are
    lockstep's at --eval.batch_size=1 (LeRobot's select_action), whatever the workers."""
    ckpt = request.getfixturevalue(ckpt_fixture)
    configs = {
        "lockstep": ("--eval.mode=lockstep", "--eval.batch_size=1"),
        "w2": ("--workers=2", "--slots_per_worker=1", "--policy.max_batch_size=1"),
        "w1": ("--workers=1", "--slots_per_worker=3", "--policy.max_batch_size=1"),
    }

    def run(name: str) -> Any:
        return _eval(ckpt, tmp_path / name, *configs[name], "--eval.max_episodes_rendered=0", "--eval.report=false",
                     HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    with ThreadPoolExecutor(len(configs)) as pool:  # independent processes: their start-ups overlap
        results = dict(zip(configs, pool.map(run, configs), strict=True))
    runs = {}
    for name, res in results.items():
        assert res.rc == 0, res.err[-3000:]
        runs[name] = per_episode(tmp_path / name)
    assert load_info(tmp_path / "w2")["mode"] == "continuous"
    assert len(runs["lockstep"]) == 4
    assert runs["w2"] == runs["lockstep"] and runs["w1"] == runs["lockstep"]


@pytest.fixture(scope="module")
def smolvla_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("num2words", reason="SmolVLM's processor needs num2words: make install-dev installs it")
    from vla_helpers import make_smolvla_checkpoint

    return make_smolvla_checkpoint(tmp_path_factory.mktemp("vla") / "smolvla", PushTConfig())
