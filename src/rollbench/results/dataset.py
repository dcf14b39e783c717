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

import os
import queue
import re
import shutil
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.errors import ConfigError
from rollbench.results.records import EpisodeRecord

PARTS_DIR = "dataset_parts"
DATASET_DIR = "dataset"


def keeps(mode: str, rec: EpisodeRecord) -> bool:
    """Whether --eval.record=`mode` keeps this finished episode."""
    return rec.ok and (mode == "all" or (mode == "failures") != rec.success)


def part_name(group: str, task_id: int, index: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', group)}_{task_id}_{index:06d}"


def part_path(output_dir: Path, rec: EpisodeRecord) -> Path:
    return output_dir / PARTS_DIR / part_name(rec.task_group, rec.task_id, rec.episode_index)


def dataset_root(output_dir: Path, recording_root: str | None) -> Path:
    return Path(recording_root) if recording_root else output_dir / DATASET_DIR


def dataset_repo_id(output_dir: Path, given: str | None) -> str:
    """--eval.recording_repo_id, else rollbench/<output_dir's name>."""
    return given or f"rollbench/{re.sub(r'[^A-Za-z0-9_.-]', '_', output_dir.resolve().name) or 'eval'}"


def _lerobot_dataset(output_dir: Path) -> Any:
    # LeRobot reads parquet metadata through `datasets`, which caches Arrow copies under
    # ~/.cache by default: hundreds of MB per run; keep them with the run unless set
    os.environ.setdefault("HF_DATASETS_CACHE", str(output_dir / ".cache" / "hf-datasets"))
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as err:
        raise ConfigError(f"--eval.recording needs LeRobot's dataset writer (lerobot 0.4.4): {err}") from None
    return LeRobotDataset


def _features(frames: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """LeRobot dataset features of one episode's frames: images (uint8 H x W x 3) as video,
    the rest float32 (booleans bool), scalars as shape (1,)."""
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
    return out


_NUMPY = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}


def write_part(output_dir: Path, rec: EpisodeRecord, fps: int, task: str, repo_id: str) -> Path:
    """Write one finished episode as a finalized LeRobot dataset of its own; its path."""
    frames: Mapping[str, np.ndarray] = rec.frames
    final = part_path(output_dir, rec)
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    features = _features(frames)
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
            else:
                value = frames[key][t]
                if spec["dtype"] != "video":
                    value = np.asarray(value, dtype=_NUMPY[spec["dtype"]]).reshape(spec["shape"])
            frame[key] = value
        frame["task"] = task
        dataset.add_frame(frame)
    dataset.save_episode()
    dataset.finalize()
    if final.exists():  # the episode ran again (a resume): its part is the same episode
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


#: ended episodes (with their frames) waiting for the writer thread, at most
MAX_QUEUED = 16


class PartWriter:
    """Writes parts on a thread of its own, so the scheduler's loop never waits for an encoder;
    hands each record back once its part is on disk (then, and only then, it may be logged)."""

    def __init__(self, output_dir: Path, fps: int, repo_id: str, task_of: Mapping[str, str]) -> None:
        self.output_dir, self.fps, self.repo_id, self.task_of = output_dir, fps, repo_id, task_of
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
                write_part(self.output_dir, rec, self.fps, self.task_of.get(rec.task, rec.task), self.repo_id)
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


def merge_parts(output_dir: Path, records: Iterable[EpisodeRecord], root: Path, repo_id: str) -> int:
    """Join the parts of `records` (in that order) into one dataset at `root` with LeRobot's
    `aggregate_datasets`; the number of episodes. The old dataset is replaced only once the
    new one is complete."""
    parts = [part_path(output_dir, r) for r in records]
    missing = [p.name for p in parts if not p.is_dir()]
    if missing:
        raise ConfigError(f"--eval.recording: the frames of {len(missing)} logged episodes are missing from "
                          f"{output_dir / PARTS_DIR} (e.g. {missing[0]}); rerun the same command to record them")
    if not parts:
        return 0
    _lerobot_dataset(output_dir)
    from lerobot.datasets.aggregate import aggregate_datasets

    tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    aggregate_datasets(repo_ids=[f"{repo_id}_part{i}" for i in range(len(parts))], aggr_repo_id=repo_id,
                       roots=parts, aggr_root=tmp)
    old = root.with_name(f".{root.name}.old-{os.getpid()}")
    if root.exists():
        os.replace(root, old)
    os.replace(tmp, root)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(output_dir / ".cache" / "hf-datasets", ignore_errors=True)
    return len(parts)


def push(output_dir: Path, root: Path, repo_id: str, private: bool) -> str | None:
    """Push the dataset at `root` to the hub as `repo_id` (lerobot-eval's --eval.recording_repo_id);
    what went wrong, in one line, or None. The dataset stays saved either way."""
    try:
        _lerobot_dataset(output_dir)(repo_id, root=root).push_to_hub(private=private)
    except Exception as err:  # the network, a token, a name: the evaluation is done and saved regardless
        from rollbench.errors import error_line

        return (f"--eval.recording_repo_id={repo_id}: the push to the hub failed ({error_line(err)}); the dataset is "
                f"saved in {root}; push it with: hf upload --repo-type=dataset {repo_id} {root}")
    return None
