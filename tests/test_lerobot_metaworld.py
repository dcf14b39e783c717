"""MetaWorld pixels: rollbench against `lerobot-eval` on the same LeRobot checkpoint.

With LeRobot 0.6, whose MetaWorld env seeds its goals from the reset seed (LeRobot #3727),
the two tools' episodes are equal one by one, and the pipeline test says so. With 0.4.4,
per-episode parity is impossible: its MetaWorld env draws every goal from the global
`np.random` (seeded once per run and consumed by the envs of a batch in turn), while
rollbench seeds each episode by its own seed. Two checks instead:

- the env itself: given the same goal draws, rollbench's env and LeRobot's `MetaworldEnv`
  give identical images, states, rewards and successes, step for step (cheap, exact);
- the whole pipeline, statistically: real `lerobot-eval` and real `rollbench eval` over the
  same number of episodes; rollbench's success rate must lie in the Wilson 95% interval
  of lerobot-eval's, and the per-episode `sum_reward` samples must pass a two-sample
  Kolmogorov-Smirnov test at ALPHA.

The policy is a random-init ACT whose actions follow what it sees
(`lerobot_helpers.make_steered_checkpoint`); a plain random-init ACT hardly looks at its
image, and the test could not tell a flipped image from the right one. Checked by hand
(docs/lerobot.md): rollbench running drawer-open-v3 instead fails both checks (success
0.00 outside [0.49, 0.94], KS p = 1e-5); the right task passes (success 0.80 vs 0.80, KS p = 1.0).

lerobot-eval's MetaWorld ignores `--env.episode_length` (500 steps, 480x480 images always)
and always renders 10 videos, which would cost minutes per episode on a CPU. It runs here
with two changes made in its process (`lerobot_helpers.capped_lerobot_eval`), neither of
which touches an episode's numbers: the rollout's step limit is LENGTH, the value
rollbench's `--env.episode_length` gets, and no videos are rendered.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("scipy")

from scipy import stats

from conftest import gl_backend, gl_in_this_process, load_info, run_subprocess, subprocess_env
from lerobot_helpers import capped_lerobot_eval, make_steered_checkpoint
from rollbench.benchmarks.metaworld import MetaWorldConfig
from rollbench.stats import wilson

pytestmark = [
    pytest.mark.lerobot,
    pytest.mark.metaworld,
    # not importorskip: importing metaworld imports MuJoCo, which must come after MUJOCO_GL is set
    pytest.mark.skipif(importlib.util.find_spec("metaworld") is None, reason="needs metaworld"),
]

TASK = "drawer-close-v3"  # this policy closes the drawer in most episodes, after 10-30 steps, not in all
EPISODES = 6  # 10 took 140 s of CI (480x480 frames on a CPU, both tools); 6 still has successes and failures
LENGTH = 30
SEED = 1000
ALPHA = 0.01
SIZE = 480  # lerobot-eval's MetaWorld renders 480x480 whatever the flags say
# the bias is measured on reach-v3's scene: arm forward and down, steered by what it sees
STEER: dict[str, Any] = {"bias_task": "reach-v3", "gain": 60.0, "drift": (0.0, 1.0, -0.3, 0.0)}

Sample = tuple[list[bool], list[float]]  # (successes, sum_rewards), in episode order


def benchmark(task: str = TASK) -> MetaWorldConfig:
    return MetaWorldConfig(
        task=task, obs_type="pixels_agent_pos", observation_width=SIZE, observation_height=SIZE, episode_length=LENGTH,
    )


@pytest.fixture(scope="module")
def steered_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gl_in_this_process()  # it renders in this process, as an in-process rollbench run would
    return make_steered_checkpoint(tmp_path_factory.mktemp("ckpt") / "act", benchmark(), **STEER)


def lerobot_eval(ckpt: Path, out: Path) -> Sample:
    proc = subprocess.run(
        capped_lerobot_eval(
            LENGTH, False, f"--policy.path={ckpt}", "--policy.device=cpu", "--eval.use_async_envs=false", "--env.type=metaworld",
            f"--env.task={TASK}",
            f"--eval.n_episodes={EPISODES}", "--eval.batch_size=2", f"--seed={SEED}", f"--output_dir={out}",
        ),
        capture_output=True, text=True, timeout=600, env=subprocess_env(MUJOCO_GL=gl_backend()),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (task,) = json.loads((out / "eval_info.json").read_text())["per_task"]
    return task["metrics"]["successes"], task["metrics"]["sum_rewards"]


def rollbench_eval(ckpt: Path, out: Path, *flags: str, task: str = TASK, **env: str) -> Sample:
    res = run_subprocess(
        "eval", "--env.type=metaworld", f"--env.task={task}", "--env.obs_type=pixels_agent_pos",
        f"--env.observation_width={SIZE}", f"--env.observation_height={SIZE}", f"--env.episode_length={LENGTH}",
        "--policy.type=lerobot", f"--policy.path={ckpt}", f"--eval.n_episodes={EPISODES}", f"--seed={SEED}",
        f"--output_dir={out}", *flags, timeout=600, **env,
    )
    assert res.rc == 0, res.err[-3000:]
    (result,) = load_info(out)["per_task"]
    return result["metrics"]["successes"], result["metrics"]["sum_rewards"]


def disagreements(theirs: Sample, ours: Sample) -> list[str]:
    """Why the two samples do not look like draws from one distribution (empty: they do)."""
    (their_success, their_sums), (our_success, our_sums) = theirs, ours
    assert len(our_success) == len(their_success) == EPISODES
    problems = []
    interval = wilson(sum(their_success), EPISODES)
    assert interval is not None
    rate = sum(our_success) / EPISODES
    if not interval[0] <= rate <= interval[1]:
        problems.append(f"success {rate:.2f} outside lerobot-eval's Wilson 95% [{interval[0]:.2f}, {interval[1]:.2f}]")
    p = stats.ks_2samp(our_sums, their_sums).pvalue
    if p < ALPHA:
        problems.append(f"sum_reward KS p={p:.2g} < {ALPHA}: ours {sorted(our_sums)}, lerobot-eval's {sorted(their_sums)}")
    return problems


def lerobot_seeds_goals() -> bool:
    """Whether the installed LeRobot's MetaWorld env draws its goals from the reset seed
    (0.6, LeRobot #3727: `seeded_rand_vec = True` on the inner env), not the global np.random."""
    import inspect

    from lerobot.envs.metaworld import MetaworldEnv

    return "seeded_rand_vec = True" in inspect.getsource(MetaworldEnv)


@pytest.mark.slow
def test_metaworld_pixels_match_lerobot_eval(steered_ckpt: Path, tmp_path: Path) -> None:
    """Episode by episode where LeRobot seeds MetaWorld's goals from each episode's seed (0.6):
    lerobot-eval's episode i has seed SEED + i, as rollbench's, and lockstep at lerobot-eval's
    batch size gives its episodes bit for bit. In distribution before (0.4.4), in continuous mode.

    Continuous mode's episodes differ from lockstep's in the last digits of the policy's
    actions (other batch-mates, other float sums), which this steered policy (gain 60, 480x480
    pixels) turns into different episodes: one of the six flipped to a failure when tried."""
    per_episode = lerobot_seeds_goals()
    flags = ("--eval.mode=lockstep", "--eval.batch_size=2") if per_episode else ()
    with ThreadPoolExecutor(1) as pool:  # the two tools at once: independent processes
        their_run = pool.submit(lerobot_eval, steered_ckpt, tmp_path / "lerobot")
        ours = rollbench_eval(steered_ckpt, tmp_path / "rollbench", *flags)
        theirs = their_run.result()
    assert 0 < sum(theirs[0]) < EPISODES and len(set(theirs[1])) == EPISODES, (
        f"lerobot-eval's episodes should differ and only some succeed, or the comparison says little: {theirs}"
    )
    if per_episode:  # success bit for bit, rewards to 1e-12 (MuJoCo's sums differ by an ulp between processes)
        assert ours[0] == theirs[0]
        assert ours[1] == pytest.approx(theirs[1], rel=1e-12, abs=1e-12)
    else:
        assert disagreements(theirs, ours) == []


def test_env_equals_lerobots_metaworld_env_given_the_same_goals() -> None:
    """rollbench's MetaWorld env == LeRobot's `MetaworldEnv` when both draw goals from one seed:
    LeRobot 0.6's does so by itself (its reset seeds the goals, LeRobot #3727), 0.4.4's after
    the two lines below."""
    gl_in_this_process()
    from lerobot.envs.metaworld import MetaworldEnv

    ours = benchmark().make_task_env(TASK)
    theirs = MetaworldEnv(task=TASK, obs_type="pixels_agent_pos")
    rng = np.random.default_rng(0)
    seeds_itself = hasattr(theirs, "_ensure_env")  # 0.6: the inner env is built at the first reset, seeded
    try:
        for seed in (3, 4):
            if not seeds_itself:  # the only difference: LeRobot 0.4.4 leaves goals to the global np.random
                theirs._env.seed(seed)
                theirs._env.seeded_rand_vec = True
            (a, _), (b, _) = ours.reset(seed=seed), theirs.reset(seed=seed)
            for t in range(8):
                assert a.keys() == b.keys() == {"pixels", "agent_pos"}
                for key in a:
                    np.testing.assert_array_equal(a[key], b[key], err_msg=f"seed {seed} step {t}: {key}")
                action = rng.uniform(-1, 1, 4).astype(np.float32)
                a, ra, ta, _, ia = ours.step(action)
                b, rb, tb, _, ib = theirs.step(action)
                assert (ra, ta, ia["is_success"]) == (rb, tb, ib["is_success"]), (seed, t)
    finally:
        ours.close()
        theirs.close()
