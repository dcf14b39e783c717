"""Episode videos: frames are encoded (H.264, PyAV) in a background thread as they come.

`VideoRecorder` belongs to one process (a worker, or the main process in lockstep mode).
`start(key, path, fps)` opens an episode, `add(key, frame)` queues a frame, `finish(key)`
closes it; the encoder thread writes `path` through a temporary name and renames it when
complete, so a file at `path` is always a whole video. Stepping never waits on encoding
(only on the queue, which is bounded so a slow encoder cannot eat all memory), except at the
end of a filmed episode: `finish` returns once its video is in place, so the episode's record,
which names the video, is made (and logged) after the file exists; a kill between the two
leaves an episode to run (and film) again, never a record whose video is missing.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.errors import ConfigError
from rollbench.results.log import EPISODES_DIR
from rollbench.results.records import EpisodeRecord

log = logging.getLogger(__name__)

QUEUE_FRAMES = 256


def steps_per_frame(fps: int, video_fps: int) -> int:
    """Steps between two video frames: as many as keep `video_fps` frames per second of
    simulated time (the benchmark runs `fps` steps per second), at least 1."""
    return max(1, fps // max(1, video_fps))


def video_path(output_dir: str | Path, task_group: str, task_id: int, episode_index: int) -> Path:
    return Path(output_dir) / "videos" / f"{task_group}_{task_id}" / f"episode_{episode_index}.mp4"


def missing(root: Path, records: Iterable[EpisodeRecord], recursive: bool = False) -> list[str]:
    """The videos that records name and that are not on disk: under `root`, or (`recursive`: a
    merge of copied run directories) under a run directory below it."""
    roots = [root, *(p.parent for p in root.glob(f"**/{EPISODES_DIR}"))] if recursive else [root]
    return [r.video_path for r in records
            if r.video_path and not any((base / r.video_path).is_file() for base in roots)]


def check_encoder() -> None:
    try:
        # optional: PyAV (the video extra); importing it is the check
        import av  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--eval.max_episodes_rendered > 0 needs PyAV to write videos; install it with "
            "`pip install 'rollbench[video]'` or pass --eval.max_episodes_rendered=0"
        ) from None


class _Episode:
    def __init__(self, path: Path, fps: int | Fraction) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
        self.fps = fps
        self.container: Any = None
        self.stream: Any = None

    def add(self, frame: np.ndarray) -> None:
        import av  # optional: PyAV (the video extra)

        if self.container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.container = av.open(str(self.tmp), mode="w")
            self.stream = self.container.add_stream("libx264", rate=self.fps)
            # x264's default (preset medium, a thread per core) cost 3.1 ms of CPU per 384x384
            # frame here, taken from the envs; veryfast on one thread 1.0 ms, files as small
            self.stream.options = {"preset": "veryfast"}
            self.stream.thread_count = 1
            h, w = frame.shape[:2]
            self.stream.width, self.stream.height = w - w % 2, h - h % 2  # yuv420p needs even sizes
            self.stream.pix_fmt = "yuv420p"
        h, w = self.stream.height, self.stream.width
        img = np.ascontiguousarray(frame[:h, :w, :3], dtype=np.uint8)
        for packet in self.stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
            self.container.mux(packet)

    def close(self) -> None:
        if self.container is None:
            return
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()
        os.replace(self.tmp, self.path)


class _Done(threading.Event):
    written = False


class VideoRecorder:
    def __init__(self) -> None:
        self._q: queue.Queue[tuple[str, Any, Any]] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._open: dict[Any, _Episode] = {}
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def _run(self) -> None:
        while True:
            op, key, payload = self._q.get()
            if op == "stop":
                return
            try:
                if op == "start":
                    self._open[key] = payload
                elif op == "frame" and key in self._open:
                    self._open[key].add(payload)
                elif op == "finish":
                    if key in self._open:
                        self._open.pop(key).close()
                        payload.written = True
                    payload.set()
                elif op == "drop" and key in self._open:
                    ep = self._open.pop(key)
                    if ep.container is not None:
                        ep.container.close()
                        ep.tmp.unlink(missing_ok=True)
            except Exception as err:  # a video must never take an episode down
                self._open.pop(key, None)
                if op == "finish":
                    payload.set()  # not written
                self.errors.append(f"video {key}: {type(err).__name__}: {err}")
                log.warning("video for %s failed: %s", key, err)

    def _put(self, item: tuple[str, Any, Any]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rollbench-video", daemon=True)
            self._thread.start()
        self._q.put(item)

    def start(self, key: Any, path: Path, fps: int | Fraction) -> None:
        self._put(("start", key, _Episode(path, fps)))

    def add(self, key: Any, frame: np.ndarray | None) -> None:
        if frame is not None:
            self._put(("frame", key, np.array(frame, copy=True)))

    def finish(self, key: Any) -> bool:
        """Close the episode's video and wait until it is in place; whether it was written
        (False: the encoder failed on it, said in `errors`, or it had no frame)."""
        done = _Done()
        self._put(("finish", key, done))
        done.wait()
        return done.written

    def drop(self, key: Any) -> None:
        """The episode failed: discard its partial video."""
        self._put(("drop", key, None))

    def close(self) -> None:
        """Wait until every queued frame is encoded and every finished video renamed."""
        if self._thread is not None:
            self._q.put(("stop", None, None))
            self._thread.join()
            self._thread = None
