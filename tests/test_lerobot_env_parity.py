"""rollbench's LIBERO and ALOHA envs against LeRobot's, and `rollbench eval` against `lerobot-eval` on LIBERO.

- The envs, step for step: each side is built the way LeRobot builds it (its env config and
  `make_env`), reset to the same episode and stepped with the same actions. What each hands
  the policy must be equal bit for bit: rollbench's batch after `to_features`, the env
  processor (`get_env_processors`) and the adapter's tensor conversion (`to_policy_batch`),
  against LeRobot's after `preprocess_observation` and its env preprocessor
  (`LiberoProcessorStep`, from `make_env_pre_post_processors`). Rewards, terminations and
  successes too. The raw observations are compared as well, so a difference is placed in
  the simulator or in the processor.
- The whole pipeline on LIBERO: real `lerobot-eval` and real `rollbench eval` run one
  checkpoint (a tiny SmolVLA; a tiny X-VLA through its own env processors) over the same 2
  episodes. Per-episode success and sum_reward must be equal, and
  so must every action each env received (recorded in each env's `step`), which a policy
  computes from all it saw: equal actions at every step mean equal inputs at every step.
  LIBERO's reward is sparse (1 on success), so a random-init policy earns 0 in both; the
  actions are what makes this comparison say something.

`lerobot-eval` cannot run LIBERO here unchanged: hf-libero's assets come from the hub at
first use (`get_assets_path()` ignores the `assets` entry of its config file; it looks in
its own `_assets_path_cache`, then beside its code, then downloads, which fails offline
with `FileNotFoundError: .../libero/assets/scenes/libero_tabletop_base_style.xml`). Its
process gets four changes (LEROBOT_EVAL below), none touching what an episode does: the
assets path cache points at the installed assets (what rollbench does itself), no videos
(its `render()` renders both cameras once more per step), the action recorder, and the
cameras' size, passed to LeRobot's `LiberoEnv` (its config does not pass one): the episode
comparisons render 64x64 in both tools, since rendering is most of LIBERO's cost on a CPU
(~0.1 s per 256x256 frame here, 28 frames per reset). The step-for-step env comparison
keeps LeRobot's 256x256.

LeRobot's LIBERO config does not pass its image size (360x360 declared) or
`camera_name_mapping` to the env, and its ALOHA config passes no image size either, so
the envs render their defaults here: LIBERO 360x360 with LeRobot 0.6 (256x256 with 0.4.4), ALOHA 480x640.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot")

from conftest import TESTS, gl_backend, gl_in_this_process, load_info, per_episode, run_subprocess, subprocess_env

pytestmark = [pytest.mark.lerobot, pytest.mark.slow]

# not importorskip: importing a simulator imports MuJoCo, which must come after MUJOCO_GL is set
_has = importlib.util.find_spec
needs_aloha = pytest.mark.skipif(_has("gym_aloha") is None, reason="needs gym-aloha")


def _libero_assets() -> Path | None:
    if _has("libero") is None:
        return None
    from rollbench.benchmarks.libero import find_assets

    return find_assets(None)


needs_libero = pytest.mark.skipif(_libero_assets() is None, reason="needs hf-libero and LIBERO assets")

SUITE = "libero_spatial"  # task 0: pick up the black bowl between the plate and the ramekin
ALOHA_TASK = "AlohaTransferCube-v0"
ENV_STEPS = 10  # LIBERO renders two 256x256 cameras at ~6 steps/s here (360x360: about half that)
ALOHA_STEPS = 20
EPISODES = 2
LENGTH = 12
SEED = 1000
#: the cameras' size in the episode comparisons (both tools; LIBERO_SIZE below)
SIZE = 64
LIBERO_SIZE = (f"--env.observation_height={SIZE}", f"--env.observation_width={SIZE}")


def flatten(obs: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    """LeRobot's nested observation of a batch of one -> {"pixels/image": row 0, ...}."""
    out: dict[str, np.ndarray] = {}
    for key, value in obs.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = np.asarray(value)[0]
    return out


def policy_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The observation tensors of a LeRobot batch (its pipelines also carry transition keys)."""
    return {k: v for k, v in batch.items() if k.startswith("observation.")}


def assert_same(ours: Mapping[str, Any], theirs: Mapping[str, Any], where: str) -> None:
    assert sorted(ours) == sorted(theirs), where
    for key in theirs:
        a, b = np.asarray(ours[key]), np.asarray(theirs[key])
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where} {key}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=f"{where}: {key}")


def rollbench_policy_batch(bench: Any, obs: Mapping[str, Any]) -> dict[str, Any]:
    """What a LeRobot checkpoint gets from rollbench for one env's observation."""
    from rollbench.policies.lerobot import to_policy_batch

    pre, _ = bench.get_env_processors()
    batch = pre(bench.to_features({k: np.asarray(v)[None] for k, v in obs.items()}))
    return policy_inputs(to_policy_batch({**batch, "task": ["-"]}))


def lerobot_policy_batch(pre: Any, obs: Mapping[str, Any]) -> dict[str, Any]:
    """What a LeRobot checkpoint gets from lerobot-eval's rollout (before the policy's own processors)."""
    from lerobot.envs.utils import preprocess_observation

    return policy_inputs(pre(preprocess_observation(obs)))


def in_own_gl_context(vec: Any) -> Any:
    """LeRobot's vector env of one LIBERO env, with that env's GL context made current.

    robosuite renders in, and frees an old context's GL objects (at every reset, which
    rebuilds the simulation) in, whatever GL context is current. rollbench's env makes its own
    current before it resets or steps; LeRobot's does not, so here it would draw in
    rollbench's context, or free rollbench's objects (garbage frames either way). Alone in a
    process its own context is the current one.
    """
    env = vec.envs[0]
    if getattr(env, "_env", None) is None and hasattr(env, "_ensure_env"):
        env._ensure_env()  # LeRobot 0.6 builds its LIBERO env at the first reset: build it now
    ctx = getattr(env._env.sim, "_render_context_offscreen", None)
    if ctx is not None:
        ctx.gl_ctx.make_current()
    return vec


def their_success(info: Mapping[str, Any]) -> bool:
    return bool(info["final_info"]["is_success"][0]) if "final_info" in info else bool(info["is_success"][0])


# -- 1. LIBERO, step for step -----------------------------------------------------------
@pytest.mark.libero
@needs_libero
@pytest.mark.parametrize("suite", [SUITE, "libero_object"])
def test_libero_env_equals_lerobots_step_for_step(suite: str) -> None:
    """The first task of two suites (each suite has its own scenes, objects and init states)."""
    gl_in_this_process()
    from rollbench.benchmarks.libero import LiberoConfig, prepare_libero

    bench = LiberoConfig(task=suite, task_ids=("0",))
    prepare_libero(bench.assets())  # hf-libero's config file and assets, for LeRobot's import too
    from lerobot.envs.configs import LiberoEnv
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.processor.env_processor import LiberoProcessorStep

    # both tools' defaults, which agree on either line (0.6: 360x360 at 20 fps; 0.4.4: 256x256 at 30)
    cfg = LiberoEnv(task=suite, task_ids=[0], episode_length=ENV_STEPS + 1)
    assert type(bench).fps == cfg.fps
    their_pre, _ = make_env_pre_post_processors(cfg, ACTConfig(device="cpu"))
    assert [type(s) for s in their_pre.steps] == [LiberoProcessorStep]
    theirs = make_env(cfg, n_envs=1)[suite][0]  # a SyncVectorEnv, as lerobot-eval makes it
    (task,) = bench.tasks()[suite]
    ours = bench.make_task_env(task)
    rng = np.random.default_rng(0)
    try:
        ours.episode_index = 0  # LeRobot's sub-env 0 of 1 starts from init state 0
        (a, _), (b, _) = ours.reset(seed=SEED), in_own_gl_context(theirs).reset(seed=[SEED])
        for t in range(ENV_STEPS + 1):
            where = f"step {t}"
            assert_same(a, flatten(b), f"{where}, raw")
            theirs_in = lerobot_policy_batch(their_pre, b)
            assert sorted(theirs_in) == ["observation.images.image", "observation.images.image2", "observation.state"]
            assert_same(rollbench_policy_batch(bench, a), theirs_in, f"{where}, after the processors")
            if t == ENV_STEPS:
                break
            action = rng.uniform(-1, 1, 7).astype(np.float32)
            a, ra, ta, _, ia = ours.step(action)
            b, rb, tb, _, ib = in_own_gl_context(theirs).step(action[None])
            assert (ra, ta, ia["is_success"]) == (float(rb[0]), bool(tb[0]), their_success(ib)), where
    finally:
        ours.close()
        in_own_gl_context(theirs).close()


# -- 2. ALOHA, step for step ------------------------------------------------------------
@pytest.mark.aloha
@needs_aloha
@pytest.mark.parametrize("aloha_task", [ALOHA_TASK, "AlohaInsertion-v0"])
def test_aloha_env_equals_lerobots_step_for_step(aloha_task: str) -> None:
    gl_in_this_process()
    from lerobot.envs.configs import AlohaEnv
    from lerobot.envs.factory import make_env

    from rollbench.benchmarks.aloha import AlohaConfig

    bench = AlohaConfig(task=aloha_task)
    theirs = make_env(AlohaEnv(task=aloha_task), n_envs=1)["aloha"][0]
    ours = bench.make_task_env(aloha_task)
    identity = lambda batch: batch  # noqa: E731  (LeRobot adds no env processor for ALOHA)
    rng = np.random.default_rng(0)
    try:
        (a, _), (b, _) = ours.reset(seed=SEED), theirs.reset(seed=[SEED])
        for t in range(ALOHA_STEPS + 1):
            where = f"step {t}"
            assert_same({("pixels/top" if k == "top" else k): v for k, v in a.items()}, flatten(b), f"{where}, raw")
            theirs_in = lerobot_policy_batch(identity, b)
            assert sorted(theirs_in) == ["observation.images.top", "observation.state"]
            assert_same(rollbench_policy_batch(bench, a), theirs_in, f"{where}, as the policy gets it")
            if t == ALOHA_STEPS:
                break
            action = rng.uniform(-1, 1, 14).astype(np.float32)
            a, ra, ta, _, ia = ours.step(action)
            b, rb, tb, _, ib = theirs.step(action[None])
            assert (ra, ta, ia["is_success"]) == (float(rb[0]), bool(tb[0]), their_success(ib)), where
    finally:
        ours.close()
        theirs.close()


# -- 3. LIBERO, rollbench eval vs lerobot-eval, episode for episode ---------------------
# lerobot-eval with three changes made in its process (argv[1]: the assets folder, argv[2]:
# the file the actions go to); see the module docstring
LEROBOT_EVAL = """
import json, sys
import libero.libero
assets, record, size = sys.argv.pop(1), sys.argv.pop(1), int(sys.argv.pop(1))
libero.libero._assets_path_cache = assets
import lerobot.envs.libero as lib
import lerobot.scripts.lerobot_eval as le
init = lib.LiberoEnv.__init__
def sized(self, *args, **kwargs):
    init(self, *args, **{**kwargs, "observation_width": size, "observation_height": size})
lib.LiberoEnv.__init__ = sized
step = lib.LiberoEnv.step
def recorded(self, action):
    with open(record, "a") as fh:
        fh.write(json.dumps([self.init_state_id - self._reset_stride, str(action.dtype), action.tolist()]) + "\\n")
    return step(self, action)
lib.LiberoEnv.step = recorded
eval_all = le.eval_policy_all
le.eval_policy_all = lambda *args, **kwargs: eval_all(*args, **{**kwargs, "max_episodes_rendered": 0})
le.main()
"""

# the same recorder for rollbench's env, in every process of the run (its env workers too):
# a sitecustomize on PYTHONPATH, enabled by $RECORD_ACTIONS
SITECUSTOMIZE = """
import json, os
if os.environ.get("RECORD_ACTIONS"):
    import rollbench.benchmarks.lerobot_env as bridge
    import rollbench.benchmarks.libero as lib
    def recorder(step):
        def recorded(self, action):
            with open(os.environ["RECORD_ACTIONS"], "a") as fh:
                fh.write(json.dumps([self.episode_index, str(action.dtype), action.tolist()]) + "\\n")
            return step(self, action)
        return recorded
    lib.LiberoTaskEnv.step = recorder(lib.LiberoTaskEnv.step)
    # LeRobot's LIBERO through the bridge: its wrapper knows the episode
    bridge.InitStateOfEpisode.step = recorder(lambda self, action: self.env.step(action))
if os.environ.get("LEROBOT_LIBERO_SIZE"):  # LeRobot's LiberoEnv at lerobot-eval's size here (LEROBOT_EVAL)
    import lerobot.envs.libero as their_lib
    size, init = int(os.environ["LEROBOT_LIBERO_SIZE"]), their_lib.LiberoEnv.__init__
    def sized(self, *args, **kwargs):
        init(self, *args, **{**kwargs, "observation_width": size, "observation_height": size})
    their_lib.LiberoEnv.__init__ = sized
"""

Actions = dict[int, list[tuple[str, list[float]]]]


def read_actions(path: Path) -> Actions:
    """episode -> [(dtype, action)] in step order (each episode is stepped by one process)."""
    out: Actions = defaultdict(list)
    for line in path.read_text().splitlines():
        episode, dtype, action = json.loads(line)
        out[episode].append((dtype, action))
    return dict(out)


@pytest.fixture(scope="module")
def libero_smolvla_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-init SmolVLA with LIBERO's features (two cameras, 8-d state, 7-d action).
    It infers every 4th step; that every step's observation reaches a policy as LeRobot's does
    is the step-for-step test's (1.)."""
    pytest.importorskip("num2words", reason="SmolVLM's processor needs num2words: make install-dev installs it")
    from rollbench.benchmarks.libero import LiberoConfig
    from vla_helpers import make_smolvla_checkpoint

    bench = LiberoConfig(task=SUITE, task_ids=("0",), observation_height=SIZE, observation_width=SIZE)
    return make_smolvla_checkpoint(tmp_path_factory.mktemp("vla") / "smolvla", bench)


@pytest.mark.libero
@pytest.mark.slow
@needs_libero
def test_libero_smolvla_episodes_equal_lerobot_eval(libero_smolvla_ckpt: Path, tmp_path: Path) -> None:
    """SmolVLA on LIBERO: both cameras resized with padding, the 8-d state padded, the task's
    instruction tokenized, the flow-matching noise drawn as lerobot-eval draws it: every action
    of every step equal."""
    assert_libero_episodes_equal_lerobot_eval(
        libero_smolvla_ckpt, tmp_path, "--policy.seeding=lerobot-eval", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
    )


@pytest.fixture(scope="module")
def libero_xvla_ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tiny X-VLA (two cameras, 20-d state, 20-d ee6d action) saved twice: with the
    pre-processor the hub's lerobot/xvla-libero has ("published": no image normalisation of
    its own, its env processor's does it) and with the one `make_pre_post_processors` writes."""
    from rollbench.benchmarks.libero import LiberoConfig
    from vla_xvla import make_xvla_libero_checkpoint

    bench = LiberoConfig(task=SUITE, task_ids=("0",), observation_height=SIZE, observation_width=SIZE)
    root = tmp_path_factory.mktemp("xvla")
    return {kind: make_xvla_libero_checkpoint(root / kind, bench, published=kind == "published")
            for kind in ("published", "standard")}


@pytest.mark.libero
@pytest.mark.slow
@needs_libero
def test_libero_xvla_episodes_equal_lerobot_eval(libero_xvla_ckpts: dict[str, Path], tmp_path: Path) -> None:
    """X-VLA on LIBERO through its own env processors (its LIBERO step: one camera flipped, the
    20-d state from the eef rotation matrix; ImageNet normalisation; the domain id; the 6D
    rotation turned into LIBERO's 7-d action): every action equal to lerobot-eval's. The same
    weights saved with `make_pre_post_processors`' pipeline, on which lerobot-eval 0.4.4 fails
    (it normalises twice), run on LeRobot's own LIBERO through the bridge give the same actions:
    the shared steps run once, and the bridge hands X-VLA LeRobot's observation as the native
    benchmark does."""
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    runs: dict[str, Any] = {}

    def standard_through_the_bridge() -> None:
        runs["standard"], _ = run_rollbench_on_libero(
            libero_xvla_ckpts["standard"], tmp_path / "standard", "--policy.seeding=lerobot-eval", bridge=True, **offline,
        )
        # the preflight sees what X-VLA's env processors make: the 20-d state, the model's 20-d action
        runs["check"] = run_subprocess("check", "--env.type=libero", f"--env.task={SUITE}", "--env.task_ids=0",
                                       *LIBERO_SIZE, f"--policy.path={libero_xvla_ckpts['standard']}",
                                       **libero_threads(**offline))

    assert_libero_episodes_equal_lerobot_eval(
        libero_xvla_ckpts["published"], tmp_path / "published", "--policy.seeding=lerobot-eval",
        meanwhile=standard_through_the_bridge, **offline,
    )
    published = read_actions(tmp_path / "published" / "rollbench.jsonl")
    assert read_actions(runs["standard"]) == published
    res = runs["check"]
    assert res.rc == 0 and "it fits" in res.out, res.out + res.err[-2000:]
    assert re.search(r"observation\.state +STATE\[20\] +STATE\[20\] float32 +ok", res.out), res.out


@pytest.mark.libero
@pytest.mark.slow
@needs_libero
def test_libero_xvla_runs_continuous_with_the_episodes_of_lockstep_at_batch_one(libero_xvla_ckpts: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    """X-VLA leaves lockstep (a queue per slot; each row's noise drawn from its episode's
    generator around the call, X-VLA ignoring `noise=`), through its own env processors:
    continuous in 2 workers at one row per call gives lockstep's actions at batch 1, every step."""
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    configs = {"lockstep": ("--eval.mode=lockstep", "--eval.batch_size=1"),
               "w2": ("--workers=2", "--slots_per_worker=1", "--policy.max_batch_size=1")}

    def run(name: str) -> tuple[Path, list[Any]]:
        return run_rollbench_on_libero(libero_xvla_ckpts["standard"], tmp_path / name, mode=configs[name], **offline)

    with ThreadPoolExecutor(len(configs)) as pool:  # independent processes: their start-ups overlap
        runs = dict(zip(configs, pool.map(run, configs), strict=True))
    actions = {name: read_actions(path) for name, (path, _) in runs.items()}
    assert sorted(actions["lockstep"]) == list(range(EPISODES))
    assert all(len(steps) == LENGTH for steps in actions["lockstep"].values())
    assert actions["w2"] == actions["lockstep"]
    assert runs["w2"][1] == runs["lockstep"][1]
    assert actions["lockstep"][0] != actions["lockstep"][1]  # each episode acts on its own


def libero_threads(**env: str) -> dict[str, str]:
    """Both tools' environment: one torch thread (its CPU kernels vary with threads), the GL backend."""
    return {"OMP_NUM_THREADS": "1", "MUJOCO_GL": gl_backend(), **env}


LOCKSTEP = ("--eval.mode=lockstep", f"--eval.batch_size={EPISODES}")


def run_rollbench_on_libero(ckpt: Path, tmp_path: Path, *flags: str, bridge: bool = False,
                            mode: tuple[str, ...] = LOCKSTEP, **env: str) -> tuple[Path, list[Any]]:
    """`rollbench eval` (lockstep at one batch, or `mode`'s flags) on LIBERO's first
    libero_spatial task, every action recorded: (the recorded actions' file, each episode's
    results in order). `bridge`: LeRobot's LIBERO (`--env.type=lerobot --env.name=libero`)
    instead of rollbench's."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    our_actions = tmp_path / "rollbench.jsonl"
    if bridge:  # LeRobot's config passes no camera size to its env: the hook gives it lerobot-eval's
        env_flags: tuple[str, ...] = ("--env.type=lerobot", "--env.name=libero", "--env.fields=task_ids=[0]")
        env = {**env, "LEROBOT_LIBERO_SIZE": str(SIZE)}
    else:
        env_flags = ("--env.type=libero", "--env.task_ids=0", *LIBERO_SIZE)
    res = run_subprocess(
        "eval", *env_flags, f"--env.task={SUITE}", f"--env.episode_length={LENGTH}",
        f"--policy.path={ckpt}", "--policy.device=cpu", *mode, f"--eval.n_episodes={EPISODES}", f"--seed={SEED}", f"--output_dir={tmp_path / 'rollbench'}", *flags, timeout=600,
        PYTHONPATH=os.pathsep.join([str(hook), str(TESTS)]), RECORD_ACTIONS=str(our_actions), **libero_threads(**env),
    )
    assert res.rc == 0, res.err[-3000:]
    assert load_info(tmp_path / "rollbench")["mode"] == ("lockstep" if "--eval.mode=lockstep" in mode else "continuous")
    eps = per_episode(tmp_path / "rollbench")
    return our_actions, [eps[(SUITE, 0, i)] for i in range(EPISODES)]


def assert_libero_episodes_equal_lerobot_eval(ckpt: Path, tmp_path: Path, *flags: str,
                                              meanwhile: Callable[[], None] | None = None, **env: str) -> None:
    """lerobot-eval and `rollbench eval` (lockstep) on LIBERO's first libero_spatial task: every
    step's action (recorded in both processes) and every episode's results equal. The two run
    at once (lerobot-eval uses one core), and so does `meanwhile`, if given."""
    from rollbench.benchmarks.libero import LiberoConfig, prepare_libero

    libero_ckpt = ckpt
    tmp_path.mkdir(parents=True, exist_ok=True)
    assets = LiberoConfig(task=SUITE).assets()
    prepare_libero(assets)  # sets $LIBERO_CONFIG_PATH, which both subprocesses inherit
    threads = libero_threads(**env)
    their_actions = tmp_path / "lerobot.jsonl"
    their_run = functools.partial(
        subprocess.run,
        [
            sys.executable, "-c", LEROBOT_EVAL, str(assets), str(their_actions), str(SIZE), f"--policy.path={libero_ckpt}",
            "--policy.device=cpu", "--eval.use_async_envs=false", "--env.type=libero", f"--env.task={SUITE}", "--env.task_ids=[0]",
            f"--env.episode_length={LENGTH}", f"--eval.n_episodes={EPISODES}", f"--eval.batch_size={EPISODES}",
            f"--seed={SEED}", f"--output_dir={tmp_path / 'lerobot'}",
        ],
        capture_output=True, text=True, timeout=600, env=subprocess_env(**threads), stdin=subprocess.DEVNULL,
    )
    with ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(their_run)
        our_actions, ours = run_rollbench_on_libero(libero_ckpt, tmp_path, *flags, **env)
        if meanwhile is not None:
            meanwhile()
        proc = theirs.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (task,) = json.loads((tmp_path / "lerobot" / "eval_info.json").read_text())["per_task"]

    print(task["metrics"], ours)
    a, b = read_actions(our_actions), read_actions(their_actions)
    assert sorted(a) == sorted(b) == list(range(EPISODES))
    for i in range(EPISODES):
        assert len(a[i]) == len(b[i]) == ours[i][3] == LENGTH, i
        for t, (x, y) in enumerate(zip(a[i], b[i], strict=True)):
            assert x == y, f"episode {i} step {t}: {x} vs {y}"
    m = task["metrics"]
    assert [r[0] for r in ours] == m["successes"]
    for r, s in zip(ours, m["sum_rewards"], strict=True):
        assert math.isclose(r[1], s, rel_tol=0, abs_tol=0), (r[1], s)
