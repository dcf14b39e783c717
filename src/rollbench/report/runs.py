"""One finished evaluation, read back from its `eval_info.json` for `report` and `compare`.

Two writers produce that file: `rollbench eval` (per task: successes, seeds, episode
indices, step counts, videos; plus config and versions) and `lerobot-eval` (per task:
successes, rewards and videos only; its file may hold NaN). Both keep LeRobot's
`per_task[]` layout, so one reader serves both; what a writer does not record is None.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbench.config import codec
from rollbench.errors import ConfigError

EVAL_INFO = "eval_info.json"

TaskKey = tuple[str, int]  # (task_group, task_id), LeRobot's identity of a task


@dataclass(frozen=True)
class Episode:
    index: int  # episode index within its task
    success: bool
    seed: int | None
    n_steps: int | None
    video: str | None  # path relative to the run's directory, when the file exists


@dataclass(frozen=True)
class TaskResult:
    key: TaskKey
    name: str  # the task's name where recorded (rollbench), else "group/id"
    episodes: tuple[Episode, ...]
    n_failed: int  # units that crashed (not policy failures; not in the episodes)
    #: the run's own 95% interval (fractions) where it is not the Wilson interval of k of n:
    #: a task stopped by --eval.ci_width reports the rule's exact one (stopping/estimates.py)
    ci95: tuple[float, float] | None = None

    @property
    def k(self) -> int:
        return sum(e.success for e in self.episodes)

    @property
    def n(self) -> int:
        return len(self.episodes)

    @property
    def seeds(self) -> list[int] | None:
        seeds = [e.seed for e in self.episodes]
        return None if any(s is None for s in seeds) else [s for s in seeds if s is not None]


@dataclass(frozen=True)
class LoadedRun:
    """A run as `report` and `compare` read it back from its directory (eval_info.json and
    the episode logs beside it); the run being executed is `executors.base.Run`."""

    path: Path  # the eval_info.json
    info: dict[str, Any]
    tasks: dict[TaskKey, TaskResult]

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def producer(self) -> str:
        # rollbench writes its config, plan and per-episode seeds; lerobot-eval none of them
        ours = ("config" in self.info or "n_planned" in self.info or "schema_version" in self.info
                or any(t.seeds is not None for t in self.tasks.values()))
        return "rollbench" if ours else "lerobot-eval"

    @property
    def config(self) -> dict[str, Any] | None:
        cfg = self.info.get("config")
        return cfg if isinstance(cfg, dict) else None

    @property
    def versions(self) -> dict[str, str] | None:
        v = self.info.get("versions")
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else None

    def describe(self) -> str:
        """`expert on metaworld mt10` — or what is known of it."""
        cfg = self.config or {}
        policy = cfg.get("policy", {})
        env = cfg.get("env", {})
        who = policy.get("path") or policy.get("type") or "a policy"
        where = " ".join(str(x) for x in (env.get("type"), env.get("task")) if x) or ", ".join(sorted({k[0] for k in self.tasks}))
        return f"{who} on {where}"


def video_in_run(root: Path, path: Any) -> str | None:
    """The video's path relative to `root` when the file is there (lerobot-eval writes
    paths as it was given them: relative to its working directory, or absolute)."""
    if not isinstance(path, str) or not path:
        return None
    p = Path(path)
    for candidate in ([p] if p.is_absolute() else [root / p, p.resolve()]):
        try:
            rel = candidate.resolve().relative_to(root.resolve())
        except ValueError:
            continue
        if candidate.is_file():
            return rel.as_posix()
    return None


_EPISODE_IN_NAME = re.compile(r"episode_(\d+)\.mp4$")


def _episodes(root: Path, metrics: dict[str, Any], seed_start: int | None) -> tuple[Episode, ...]:
    successes = [bool(s) for s in metrics.get("successes") or []]
    n = len(successes)

    def column(name: str) -> list[Any] | None:
        values = metrics.get(name)
        return list(values) if isinstance(values, list) and len(values) == n else None

    index = column("episode_ix") or list(range(n))
    seeds = column("seeds")
    if seeds is None and seed_start is not None:
        seeds = [seed_start + i for i in index]  # lerobot-eval's rule: episode i has seed --seed + i
    steps = column("n_steps")
    # a video's name carries its episode (rollbench: episode_<i>.mp4; lerobot-eval films the
    # first episodes in order as eval_episode_<i>.mp4), so a missing file shifts nothing
    videos: dict[int, str] = {}
    for path in metrics.get("video_paths") or []:
        m = _EPISODE_IN_NAME.search(str(path))
        rel = video_in_run(root, path)
        if m and rel:
            videos[int(m.group(1))] = rel
    return tuple(
        Episode(int(index[i]), successes[i], None if seeds is None else int(seeds[i]),
                None if steps is None else int(steps[i]), videos.get(int(index[i])))
        for i in range(n)
    )


def _rule_aware_ci(task: dict[str, Any]) -> tuple[float, float] | None:
    stop, ci = task.get("stop"), task.get("pc_success_ci95")
    if not isinstance(stop, dict) or stop.get("wilson_ci95") is None or not isinstance(ci, list) or len(ci) != 2:
        return None
    return float(ci[0]) / 100, float(ci[1]) / 100


def load_run(arg: str, what: str, seed_start: int | None = None) -> LoadedRun:
    """Read a run from an output directory or an eval_info.json; `what` names the argument
    in errors. `seed_start` gives seeds to a file that records none (lerobot-eval)."""
    path = Path(arg)
    if path.is_dir():
        path = path / EVAL_INFO
    elif not path.exists():
        raise ConfigError(f"{what}={arg!r} does not exist; give a rollbench output directory or an {EVAL_INFO} file")
    if not path.is_file():
        raise ConfigError(f"{what}={arg!r} holds no {EVAL_INFO}; give a finished run's output directory or its {EVAL_INFO}")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))  # lerobot-eval writes NaN; json reads it
    except (OSError, ValueError) as err:
        raise ConfigError(f"{what}={arg!r}: cannot read {path} as JSON ({err})") from None
    if not isinstance(info, dict) or not isinstance(info.get("per_task"), list):
        raise ConfigError(f"{what}={arg!r}: {path} has no per_task list; is it an eval_info.json of rollbench or lerobot-eval?")
    tasks: dict[TaskKey, TaskResult] = {}
    for t in info["per_task"]:
        try:
            key = (str(t["task_group"]), int(t["task_id"]))
            metrics = t["metrics"]
            name = str(t.get("task") or f"{key[0]}/{key[1]}")
            failed = len(t.get("failed") or [])
            tasks[key] = TaskResult(key, name, _episodes(path.parent, metrics, seed_start), failed, _rule_aware_ci(t))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"{what}={arg!r}: a per_task entry of {path} lacks task_group, task_id or metrics ({err!r})") from None
    return LoadedRun(path, info, tasks)


def command_line(info: dict[str, Any]) -> tuple[str, bool] | None:
    """(shell command, exact?): the recorded argv, else one rebuilt from the config."""
    argv = info.get("command")
    if isinstance(argv, list) and argv:
        return shlex.join(map(str, argv)), True
    cfg = info.get("config")
    if isinstance(cfg, dict):
        return shlex.join(["rollbench", "eval", *codec.to_argv(codec.to_flags(cfg))]), False
    return None
