"""`--eval.recording`: the run's episodes as a LeRobot dataset, written by LeRobot's own writer.

    worker: EpisodeTracker.frames (the episode's frames, only while it runs)
      ──record + frames──▶ lifecycle: PartWriter (a thread) writes the episode as a dataset of its
                           own, dataset_parts/<group>_<task_id>_<index>/ (LeRobotDataset.create,
                           add_frame, save_episode, finalize; a temporary name, then a rename)
                           ──▶ only then the record goes into the durable episode log
      close: merge_parts ──▶ aggregate_datasets over the parts of the episodes that count, in
                             plan order ──▶ <output_dir>/dataset (or --eval.recording_root)

Why one dataset per episode first: LeRobot 0.4.4 keeps a dataset's parquet files open until
`finalize()` (their footers are written on close), so an episode saved into a shared dataset
is not on disk until the whole dataset is finalized, and a killed run loses every episode
since (and leaves the dataset unreadable). A finalized part per episode is durable the moment
it is renamed into place, like a log line; a rerun of the episode (a resume) writes the same
part again. Merging costs ~0.2 s per part here (LeRobot reads each part's metadata).

One dataset per run, not per task: LeRobot's multi-task datasets (LIBERO's, say) hold every
task with its language instruction per frame, which is what training and the visualiser
read; `LeRobotDataset(..., episodes=[...])` selects a task's episodes.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import queue
import re
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rollbench import perturb, quiet
from rollbench.config.eval import RecordRule
from rollbench.errors import ConfigError, error_line
from rollbench.plan import UnitKey
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord

if TYPE_CHECKING:
    from rollbench.config.run import RunConfig

log = logging.getLogger(__name__)

PARTS_DIR = "dataset_parts"
DATASET_DIR = "dataset"


def keeps(rule: RecordRule, rec: EpisodeRecord) -> bool:
    """Whether --eval.record and --eval.record_conditions (`rule`) keep this finished episode."""
    return rec.ok and rule.keeps(rec.success, rec.condition)


def part_name(group: str, task_id: int, index: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', group)}_{task_id}_{index:06d}"


def part_path(output_dir: Path, rec: EpisodeRecord) -> Path:
    return output_dir / PARTS_DIR / part_name(rec.task_group, rec.task_id, rec.episode_index)


def dataset_root(output_dir: Path, recording_root: str | None) -> Path:
    return Path(recording_root) if recording_root else output_dir / DATASET_DIR


def dataset_repo_id(output_dir: Path, given: str | None) -> str:
    """--eval.recording_repo_id, else rollbench/<output_dir's name>."""
    return given or f"rollbench/{re.sub(r'[^A-Za-z0-9_.-]', '_', output_dir.resolve().name) or 'eval'}"


#: the user's own cache for `datasets` (HF_DATASETS_CACHE), if they set one: rollbench keeps it
_USER_DATASETS_CACHE = os.environ.get("HF_DATASETS_CACHE")


def _lerobot_dataset(output_dir: Path) -> Any:
    _quiet_lerobot_datasets()
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset  # optional: lerobot
    except ImportError as err:
        raise ConfigError(f"--eval.recording needs LeRobot's dataset writer (lerobot 0.4.4 or 0.6): {err}") from None
    import datasets  # optional: comes with lerobot

    datasets.disable_progress_bars()  # `Map: 100%` once per episode
    if not _USER_DATASETS_CACHE:
        # LeRobot reads parquet files through `datasets`, which caches Arrow copies of them in
        # ~/.cache/huggingface/datasets: hundreds of MB per run; they stay with the run (and are
        # removed once its dataset is joined). Its config, not the variable: `datasets` reads
        # HF_DATASETS_CACHE once, at its import, which loading a LeRobot policy has done already.
        datasets.config.HF_DATASETS_CACHE = output_dir / ".cache" / "hf-datasets"
    quiet.reclaim()  # a terminal handler that LeRobot's import added to the root logger
    return LeRobotDataset


@functools.cache
def _quiet_lerobot_datasets() -> None:
    """Keep LeRobot's dataset messages out of rollbench's output; once per process, before the
    first import of LeRobot's dataset code (torchcodec's warning comes at import). What it logs
    goes to the debug log (rollbench.quiet, installed by the CLI)."""
    # compute_stats: `RuntimeWarning: Converting input from bool to <class 'numpy.uint8'>`
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"lerobot\.datasets\.")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import av  # optional: comes with lerobot

    # LeRobot's video code hands libav's log back to libav's own printer to fd 2 after each video
    # (`av.logging.restore_default_callback()`), which prints at libav's INFO level: the mp4
    # muxer's "Starting second pass" once per joined video. Errors only, unless --debug.
    set_libav_level = getattr(av.logging, "set_libav_level", None)  # PyAV >= 14
    if set_libav_level is not None and not logging.getLogger("rollbench").isEnabledFor(logging.DEBUG):
        set_libav_level(av.logging.ERROR)


class _Discard(io.TextIOBase):
    """A stderr for LeRobot's tqdm bars while parts are joined ("Copy data and videos: ...")."""

    def write(self, text: str) -> int:
        return len(text)


def _as_stored(frames: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Observations as a dataset stores them: one env's (a LeRobot vector env's batch axis of 1,
    which the bridge's observations keep, dropped), camera frames uint8 H x W x C (LeRobot's
    preprocessed images, float32 C x H x W in [0, 1] = pixel / 255, get their pixels back
    exactly: rint(x * 255) inverts / 255 for every uint8 value)."""
    out = dict(frames)
    for key, values in frames.items():
        if not key.startswith("observation."):
            continue
        if values.ndim >= 3 and values.shape[1] == 1:
            values = values[:, 0]
        if (key.startswith("observation.image") and np.issubdtype(values.dtype, np.floating) and values.ndim == 4
                and values.shape[1] in (1, 3, 4) and values.size and values.min() >= 0.0 and values.max() <= 1.0):
            values = np.rint(np.moveaxis(values, 1, -1) * 255.0).astype(np.uint8)
        out[key] = values
    return out


def _features(frames: Mapping[str, np.ndarray], sweep: bool) -> dict[str, dict[str, Any]]:
    """LeRobot dataset features of one episode's frames: images (uint8 H x W x 3) as video,
    the rest float32 (booleans bool), scalars as shape (1,); a sweep's frames also name their
    condition (a string, as LeRobot's `task` is one; "" the control)."""
    out: dict[str, dict[str, Any]] = {}
    for key, values in frames.items():
        shape = tuple(values.shape[1:]) or (1,)
        if values.dtype == np.uint8 and len(shape) == 3 and shape[-1] in (1, 3, 4):
            out[key] = {"dtype": "video", "shape": shape, "names": ["height", "width", "channels"]}
        elif values.dtype == np.bool_:
            out[key] = {"dtype": "bool", "shape": shape, "names": None}
        elif np.issubdtype(values.dtype, np.integer) and key == "action":
            out[key] = {"dtype": "int64", "shape": shape, "names": None}  # a discrete action
        else:
            out[key] = {"dtype": "float32", "shape": shape, "names": None}
    out["episode_seed"] = {"dtype": "int64", "shape": (1,), "names": None}
    out["episode_index_in_run"] = {"dtype": "int64", "shape": (1,), "names": None}
    if sweep:
        out["condition"] = {"dtype": "string", "shape": (1,), "names": None}
    return out


_NUMPY = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}


def write_part(output_dir: Path, rec: EpisodeRecord, fps: int, task: str, repo_id: str, sweep: bool = False) -> Path:
    """Write one finished episode as a finalized LeRobot dataset of its own; its path. `task`:
    the instruction the episode was given; `sweep`: its frames name its condition."""
    frames = _as_stored(rec.frames)
    final = part_path(output_dir, rec)
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    features = _features(frames, sweep)
    dataset = _lerobot_dataset(output_dir).create(
        repo_id=repo_id, fps=fps, features=features, root=tmp, use_videos=True, image_writer_threads=0,
        encoder_threads=1,
    )
    n = len(next(iter(frames.values())))
    for t in range(n):
        frame: dict[str, Any] = {}
        for key, spec in features.items():
            if key == "episode_seed":
                value: Any = np.array([rec.seed])
            elif key == "episode_index_in_run":
                value = np.array([rec.episode_index])
            elif key == "condition":
                value = rec.condition
            else:
                value = frames[key][t]
                if spec["dtype"] != "video":
                    value = np.asarray(value, dtype=_NUMPY[spec["dtype"]]).reshape(spec["shape"])
            frame[key] = value
        frame["task"] = task
        dataset.add_frame(frame)
    dataset.save_episode()
    dataset.finalize()
    if n == 1:
        _stats_as_longer_episodes_have_them(tmp)
    if final.exists():  # the episode ran again (a resume): its part is the same episode
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


@functools.cache
def _bool_stats_become_float() -> bool:
    """Whether the installed LeRobot gives a boolean feature float min/max in an episode of
    two frames or more (0.6 does: its quantile path casts; 0.4.4 keeps bool)."""
    from lerobot.datasets.compute_stats import get_feature_stats  # optional: lerobot

    stats = get_feature_stats(np.array([[True], [False]]), axis=0, keepdims=False)
    return bool(np.asarray(stats["min"]).dtype != np.bool_)


def _stats_as_longer_episodes_have_them(part: Path) -> None:
    """A one-frame episode's stats in the dtypes LeRobot gives every longer episode.

    LeRobot 0.6 computes a one-frame episode's stats without its quantile path, which keeps a
    boolean feature's min/max bool (`next.done` of an episode done at its first step), while
    every longer episode's are float64; `aggregate_datasets` then cannot write the joined
    episode table (`ArrowInvalid: Cannot mix NumPy dtypes bool and float64`). The part's
    episode table gets the longer episodes' dtype, as LeRobot would have computed it."""
    if not _bool_stats_become_float():
        return
    import pyarrow as pa  # optional: comes with lerobot's datasets
    import pyarrow.parquet as pq  # optional: comes with lerobot's datasets

    for path in sorted((part / "meta" / "episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        fields = [(i, f) for i, f in enumerate(table.schema) if f.name.startswith("stats/")
                  and pa.types.is_list(f.type) and pa.types.is_boolean(f.type.value_type)]
        for i, field in fields:
            table = table.set_column(i, pa.field(field.name, pa.list_(pa.float64())),
                                     table.column(i).cast(pa.list_(pa.float64())))
        if fields:
            pq.write_table(table, path)


#: ended episodes (with their frames) waiting for the writer thread, at most
MAX_QUEUED = 16


class PartWriter:
    """Writes parts on a thread of its own, so the scheduler's loop never waits for an encoder;
    hands each record back once its part is on disk (then, and only then, it may be logged)."""

    def __init__(self, output_dir: Path, fps: int, repo_id: str, task_of: Callable[[EpisodeRecord], str],
                 sweep: bool = False) -> None:
        self.output_dir, self.fps, self.repo_id, self.task_of, self.sweep = output_dir, fps, repo_id, task_of, sweep
        # bounded: episodes that end faster than their parts are written hold the loop back
        # instead of piling their frames up in memory
        self.todo: queue.Queue[EpisodeRecord | None] = queue.Queue(maxsize=MAX_QUEUED)
        self.done: queue.Queue[EpisodeRecord | BaseException] = queue.Queue()
        self.pending = 0
        self.thread = threading.Thread(target=self._run, name="rollbench-dataset-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        failed = False
        while True:
            rec = self.todo.get()
            if rec is None:
                return
            if failed:
                continue  # drained, so that a full queue never blocks the lifecycle, which will raise
            try:
                with quiet.to_debug_log("lerobot dataset"):  # what the writer prints, not the scheduler
                    write_part(self.output_dir, rec, self.fps, self.task_of(rec), self.repo_id, self.sweep)
            except BaseException as err:  # handed to the lifecycle, which stops the run with it
                self.done.put(err)
                failed = True
                continue
            self.done.put(_without_frames(rec))

    def submit(self, rec: EpisodeRecord) -> None:
        self.pending += 1
        self.todo.put(rec)

    def ready(self, wait: bool = False) -> Iterator[EpisodeRecord]:
        """Records whose parts are written (all of them, waiting, with `wait`)."""
        while self.pending:
            try:
                item = self.done.get(timeout=None) if wait else self.done.get_nowait()
            except queue.Empty:
                return
            self.pending -= 1
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self.todo.put(None)


def _without_frames(rec: EpisodeRecord) -> EpisodeRecord:
    return replace(rec, frames=None)


def sweep_parts(output_dir: Path) -> None:
    """Remove the half-written parts of a killed run (their episodes run again)."""
    for tmp in (output_dir / PARTS_DIR).glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


#: in PARTS_DIR, once a finished run's parts are joined and removed: the dataset that holds them
#: ({"root": ..., "parts": [part names, in the dataset's order]})
JOINED = "joined.json"


def joined(output_dir: Path) -> set[str]:
    """The names of the parts a finished run's dataset holds after they were removed (none
    when that dataset is gone)."""
    try:
        manifest = json.loads((output_dir / PARTS_DIR / JOINED).read_text())
        return set(manifest["parts"]) if (Path(manifest["root"]) / "meta" / "info.json").is_file() else set()
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _forget_joined(output_dir: Path) -> None:
    (output_dir / PARTS_DIR / JOINED).unlink(missing_ok=True)


def _already_joined(output_dir: Path, names: list[str], root: Path) -> bool:
    try:
        manifest = json.loads((output_dir / PARTS_DIR / JOINED).read_text())
    except (OSError, ValueError):
        return False
    return (manifest.get("parts") == names and Path(manifest.get("root", "")).resolve() == root.resolve()
            and (root / "meta" / "info.json").is_file())


def remove_joined_parts(output_dir: Path, records: Iterable[EpisodeRecord], root: Path) -> int:
    """A finished run's parts, once joined into `root`: their names go to JOINED, then their
    directories are removed (the dataset holds their frames; keeping both doubles the disk a
    recorded run takes, videos included). The bytes freed."""
    names = [part_path(output_dir, r).name for r in records]
    manifest = output_dir / PARTS_DIR / JOINED
    tmp = manifest.with_name(f".{JOINED}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"root": str(root.resolve()), "parts": names}))
    os.replace(tmp, manifest)  # first: a part removed is always named there
    freed = 0
    for name in names:
        part = output_dir / PARTS_DIR / name
        freed += sum(f.stat().st_size for f in part.rglob("*") if f.is_file())
        shutil.rmtree(part, ignore_errors=True)
    return freed


def merge_parts(output_dir: Path, records: Iterable[EpisodeRecord], root: Path, repo_id: str,
                task_of: Callable[[EpisodeRecord], str]) -> int:
    """Join the parts of `records` (in that order) into one dataset at `root` with LeRobot's
    `aggregate_datasets`, and write its EPISODES sidecar; the number of episodes. The old
    dataset is replaced only once the new one is complete. A finished run's dataset whose
    parts were removed is kept as it is when it holds exactly these episodes (the same
    command run again)."""
    records = list(records)
    parts = [part_path(output_dir, r) for r in records]
    missing = [p.name for p in parts if not p.is_dir()]
    if missing and _already_joined(output_dir, [p.name for p in parts], root):
        return len(parts)
    if missing:
        in_dataset = len(set(missing) & joined(output_dir))
        _forget_joined(output_dir)  # the next run of the command records the removed ones again
        raise ConfigError(
            f"--eval.recording: the frames of {len(missing)} logged episodes are missing from {output_dir / PARTS_DIR} "
            f"(e.g. {missing[0]}{f'; {in_dataset} of them are in the dataset joined before, which holds other episodes' if in_dataset else ''}); "
            f"rerun the same command to record them")
    _forget_joined(output_dir)  # the dataset is about to hold these parts, not the removed ones
    if not parts:
        return 0
    _lerobot_dataset(output_dir)
    from lerobot.datasets.aggregate import aggregate_datasets  # optional: lerobot

    tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    # its tqdm bars write to sys.stderr; nothing else runs while the run closes
    with contextlib.redirect_stderr(_Discard()):
        aggregate_datasets(repo_ids=[f"{repo_id}_part{i}" for i in range(len(parts))], aggr_repo_id=repo_id,
                           roots=parts, aggr_root=tmp)
    _write_episodes(tmp, records, task_of)
    old = root.with_name(f".{root.name}.old-{os.getpid()}")
    if root.exists():
        os.replace(root, old)
    os.replace(tmp, root)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(output_dir / ".cache" / "hf-datasets", ignore_errors=True)
    return len(parts)


#: in the dataset's meta/: each dataset episode's run episode (LeRobot's loader ignores the file)
EPISODES = "rollbench_episodes.json"


def _write_episodes(root: Path, records: list[EpisodeRecord], task_of: Callable[[EpisodeRecord], str]) -> None:
    """meta/EPISODES: dataset episode j -> the run's episode it is (task, condition, index, seed)
    and the instruction it was given; under language.drop the frames' `task` is "", so only
    this says which task an episode was."""
    episodes = [{"episode_index": j, "task_group": r.task_group, "task_id": r.task_id, "task": r.task,
                 "condition": r.condition, "episode_index_in_run": r.episode_index, "seed": r.seed,
                 "instruction": task_of(r), "success": r.success} for j, r in enumerate(records)]
    (root / "meta" / EPISODES).write_text(json.dumps({"episodes": episodes}, indent=1))


def push(output_dir: Path, root: Path, repo_id: str, private: bool) -> str | None:
    """Push the dataset at `root` to the hub as `repo_id` (lerobot-eval's --eval.recording_repo_id);
    what went wrong, in one line, or None. The dataset stays saved either way."""
    try:
        _lerobot_dataset(output_dir)(repo_id, root=root).push_to_hub(private=private)
    except Exception as err:  # the network, a token, a name: the evaluation is done and saved regardless
        return (f"--eval.recording_repo_id={repo_id}: the push to the hub failed ({error_line(err)}); the dataset is "
                f"saved in {root}; push it with: hf upload --repo-type=dataset {repo_id} {root}")
    return None


# --- a run's recording, from its config: what the lifecycle and the close call -------------


def instruction_of(cfg: RunConfig) -> Callable[[EpisodeRecord], str]:
    """A recorded episode's `task`: the instruction its policy was given (under language.drop
    or language.paraphrase, the condition's)."""

    @functools.cache
    def given(task: str, cid: str) -> str:
        return perturb.given_instruction(cid, cfg.eval.paraphrases, task, cfg.env.task_description(task))

    return lambda rec: given(rec.task, rec.condition)


def part_writer(cfg: RunConfig, output_dir: Path) -> PartWriter | None:
    """--eval.recording: the thread that writes each kept episode's frames before it is logged."""
    if cfg.eval.record_mode is None:
        return None
    repo_id = dataset_repo_id(output_dir, cfg.eval.recording_repo_id)
    return PartWriter(output_dir, cfg.env.fps, repo_id, instruction_of(cfg), cfg.eval.is_sweep)


def done_with_frames(cfg: RunConfig, output_dir: Path, merged: Merged,
                     still_to_do: Callable[[frozenset[UnitKey]], list[Any]]) -> frozenset[UnitKey]:
    """Of the finished units of `merged`, those a resumed recording run need not run again: an episode
    logged without its frames (a run resumed with --eval.recording added) runs again; a
    finished run's episodes are in its dataset (their parts removed), which is kept if
    nothing more runs, else joined anew: then they run again for their frames."""
    finished = merged.done_keys()
    recording = cfg.eval.record_mode
    if recording is None:
        return frozenset(finished)
    sweep_parts(output_dir)  # half-written by a killed run; their episodes were not logged
    in_dataset = joined(output_dir)

    def recorded(key: UnitKey, dataset_counts: bool) -> bool:
        rec = merged.records[key]
        part = part_path(output_dir, rec)
        return not keeps(recording, rec) or part.is_dir() or (dataset_counts and part.name in in_dataset)

    done = frozenset(k for k in finished if recorded(k, True))
    if still_to_do(done) and in_dataset:
        done = frozenset(k for k in finished if recorded(k, False))
    return done


def join(cfg: RunConfig, output_dir: Path, counted: Merged, finished: bool) -> dict[str, Any]:
    """eval_info.json's `dataset`: the recorded episodes that count, in plan order, as one
    LeRobot dataset; a finished run's parts are removed once joined (the dataset holds their
    frames)."""
    recording = cfg.eval.record_mode
    assert recording is not None
    kept = [counted.records[u.key] for u in counted.plan
            if u.key in counted.records and keeps(recording, counted.records[u.key])]
    root = dataset_root(output_dir, cfg.eval.recording_root)
    repo_id = dataset_repo_id(output_dir, cfg.eval.recording_repo_id)
    t0 = time.monotonic()
    n = merge_parts(output_dir, kept, root, repo_id, instruction_of(cfg))
    log.info("dataset: %d episodes joined into %s in %.1f s", n, root, time.monotonic() - t0)
    if finished and n:
        freed = remove_joined_parts(output_dir, kept, root)
        log.debug("dataset: removed the %d joined parts (%.1f MB)", n, freed / 1e6)
    out: dict[str, Any] = {"root": str(root), "repo_id": repo_id, "episodes": n, "record": cfg.eval.record}
    if cfg.eval.is_sweep:  # a sweep's: which conditions, and where each episode's is said
        out.update(record_conditions=cfg.eval.record_conditions, episodes_file=f"meta/{EPISODES}")
    return out
