"""What a run needs before anything runs, checked in the order a user would fix it: the
benchmark (installed, a MUJOCO_GL that renders, its tasks, a sweep's axes), where the run
writes (--output_dir, the folders of an earlier run in it, --eval.recording_root), and for
--eval.versus the other run. Each problem is one line (a ConfigError) naming the flag, the
value and what is allowed; nothing is written and no episode runs before they pass."""

from __future__ import annotations

from pathlib import Path

from rollbench import perturb, writable
from rollbench.config.run import RunConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError
from rollbench.plan import EpisodeUnit, plan_for
from rollbench.rendering import check_user_backend
from rollbench.results import eval_info
from rollbench.results.dataset import PARTS_DIR
from rollbench.results.log import EPISODES_DIR
from rollbench.stopping.versus import precheck


def checked_plan(cfg: RunConfig) -> list[EpisodeUnit]:
    """The run's plan, once its benchmark is installed and its tasks exist (no side effects)."""
    check_benchmark(cfg)
    check_outputs(cfg)
    if cfg.eval.versus is not None:
        precheck(cfg)
    return plan_for(cfg)


def check_benchmark(cfg: RunConfig) -> None:
    """What the benchmark must have for this run, before anything runs in it (eval, and
    `rollbench tune`'s probe): installed, a MUJOCO_GL that renders, the tasks, the sweep's axes."""
    cfg.env.check_available()
    check_user_backend(cfg.env, cfg.eval.max_episodes_rendered)  # before validate_tasks: listing the tasks can import MuJoCo
    cfg.env.validate_tasks()
    if cfg.eval.perturb:  # an axis the benchmark has nothing for: refused before any episode
        ctx = StepContext(cfg.env, cfg.policy, paraphrases=cfg.eval.paraphrases)
        perturb.check_benchmark(perturb.parse(cfg.eval.perturb), cfg.env.features, cfg.env.type_name, ctx.action_space,
                                cfg.env.native_axes)
        for cid in (c for c in cfg.eval.conditions if perturb.condition(c).get("language.paraphrase")):
            for task in (t for names in cfg.env.tasks().values() for t in names):
                ctx.instruction(cid, task)  # a task without its paraphrase k: refused here


def check_outputs(cfg: RunConfig) -> None:
    """Where the run writes, before any work (a checkpoint's download, the policy's load, the
    first episode): --output_dir and the folders of an earlier run in it that this one writes
    into, and --eval.recording_root when it records."""
    writable.output_dir("--output_dir", cfg.output_dir)
    videos = Path(cfg.output_dir).expanduser() / "videos"
    filmed = [f"videos/{d.name}" for d in videos.iterdir() if d.is_dir()] if videos.is_dir() else []
    writable.run_folders("--output_dir", cfg.output_dir, [EPISODES_DIR, "logs", "videos", *filmed, PARTS_DIR,
                                                          *([] if cfg.eval.recording_root else ["dataset"])])
    _check_recording_root(cfg)


def _check_recording_root(cfg: RunConfig) -> None:
    """--eval.recording_root: the joined dataset replaces that directory at the end of the
    run, so it must be new, empty, or this run's own dataset, and its disk must take it."""
    given = cfg.eval.recording_root
    if cfg.eval.record_mode is None or not given:
        return
    flag, root = f"--eval.recording_root={given}", Path(given).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{flag} is a file; give a directory for the run's dataset (new or empty)")
    if root.is_dir() and any(root.iterdir()) and not _this_run_s_dataset(Path(cfg.output_dir), root):
        raise ConfigError(f"{flag} holds other files, and rollbench replaces that directory with the run's dataset at "
                          f"the end; give a new or empty directory (e.g. {root / 'dataset'})")
    out = Path(cfg.output_dir).expanduser().resolve()
    if root == out or root in out.parents or (root.parent == out and root.name in ("episodes", PARTS_DIR, "videos")):
        raise ConfigError(f"{flag} would replace {'the run directory' if root in (out, *out.parents) else 'a folder of the run'} "
                          f"{root} with the dataset; give a directory of its own (default: <output_dir>/dataset)")
    writable.output_dir("--eval.recording_root", given)  # the dataset's folders are made there at the end


def _this_run_s_dataset(output_dir: Path, root: Path) -> bool:
    """Whether `root` is the dataset an earlier close of this run wrote (its eval_info.json says so)."""
    info = eval_info.read(output_dir) or {}
    dataset = info.get("dataset")
    recorded = dataset.get("root") if isinstance(dataset, dict) else None
    return isinstance(recorded, str) and Path(recorded).expanduser().resolve() == root
