"""Filming, in one place: which episodes are filmed and which of their states become frames
(`VideoPlan`), one episode's video while it runs (`Film`, handed out by a process's
`Filming`), an env's frame (`grab_frame`; `vector_frames` for a vector env's rows), and the
encoder (`VideoRecorder`). An episode's tracker (`episode/tracker.py`) films through its
`Film`: the reset, every `every`-th step and the last; nothing else films. Where videos lie
and what filming costs a run are `results/video.py` and `results/video_cost.py`.

`VideoRecorder` belongs to one process (a worker, or the main process in lockstep mode):
frames are encoded (H.264, PyAV) in a background thread as they come. `start(key, path,
fps)` opens an episode, `add(key, frame)` queues a frame, `finish(key)` closes it; the
encoder thread writes `path` through a temporary name and renames it when complete, so a
file at `path` is always a whole video. Stepping never waits on encoding (only on the
queue, which is bounded so a slow encoder cannot eat all memory), except at the end of a
filmed episode: `finish` returns once its video is in place, so the episode's record, which
names the video, is made (and logged) after the file exists; a kill between the two leaves
an episode to run (and film) again, never a record whose video is missing.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from rollbench.benchmarks.frames import RENDER_VIDEO, video_frame
from rollbench.config.eval import EvalConfig
from rollbench.config.run import RunConfig
from rollbench.errors import WorkerError, error_line
from rollbench.plan import EpisodeUnit
from rollbench.rendering import gl_failure_hint
from rollbench.results.video import steps_per_frame

log = logging.getLogger(__name__)

DEFAULT_VIDEO_SIZE: int = EvalConfig.video_size  # the dataclass default, for callers without a config
QUEUE_FRAMES = 256


@dataclass(frozen=True)
class VideoPlan:
    """Which episodes get a video (episode_index < max_episodes_rendered, per task), and
    which of their states become frames: the reset, every `every`-th step and the last, at
    `size` pixels on the longer side (`benchmarks/frames.py`)."""

    output_dir: str
    max_episodes_rendered: int
    fps: int  # the benchmark's steps per second of simulated time
    size: int  # --eval.video_size
    every: int = 1  # a frame every `every` steps

    @classmethod
    def for_run(cls, cfg: RunConfig) -> VideoPlan | None:
        """The plan of `cfg`'s videos, None when it films nothing."""
        e = cfg.eval
        if e.max_episodes_rendered == 0:
            return None
        every = steps_per_frame(cfg.env.fps, e.video_fps)
        return cls(cfg.output_dir, e.max_episodes_rendered, cfg.env.fps, e.video_size, every)

    @property
    def rate(self) -> Fraction:
        """Frames per second of the video: it plays in real time."""
        return Fraction(self.fps, self.every)

    def wants(self, unit: EpisodeUnit) -> bool:
        """The first episodes of each task (of each --eval.perturb condition: its first
        episodes of each seed block, those of the control's it perturbs)."""
        return (unit.env_index if unit.condition else unit.episode_index) < self.max_episodes_rendered

    def films(self, n_steps: int, ended: bool) -> bool:
        """Is the state after step `n_steps` a frame? (The reset, n_steps = 0, always is.)"""
        return ended or n_steps % self.every == 0

    def relpath(self, unit: EpisodeUnit) -> str:
        return f"videos/{unit.task_group}_{unit.task_id}/episode_{unit.episode_index}.mp4"

    def output_dir_path(self, unit: EpisodeUnit) -> Path:
        return Path(self.output_dir) / self.relpath(unit)


class Filming:
    """A process's videos: its plan and its one recorder. `film(unit, attempt)` starts the
    video of an episode the plan wants (None for the others)."""

    def __init__(self, plan: VideoPlan) -> None:
        self.plan = plan
        self.recorder = VideoRecorder()

    @classmethod
    def of(cls, plan: VideoPlan | None) -> Filming | None:
        return cls(plan) if plan is not None else None

    def film(self, unit: EpisodeUnit, attempt: int = 0) -> Film | None:
        if not self.plan.wants(unit):
            return None
        key = (unit.key, attempt)
        self.recorder.start(key, self.plan.output_dir_path(unit), self.plan.rate)
        return Film(self, key, unit)

    def close(self) -> None:
        """Wait until every video is encoded and in place."""
        self.recorder.close()


@dataclass
class Film:
    """One episode's video while it runs."""

    filming: Filming
    key: Any
    unit: EpisodeUnit

    def wants(self, n_steps: int, ended: bool) -> bool:
        """Is the state after step `n_steps` a frame?"""
        return self.filming.plan.films(n_steps, ended)

    def shoot(self, env: Any) -> None:
        """The env's frame, now."""
        self.add(grab_frame(env, self.unit.task, self.filming.plan.size))

    def add(self, frame: Any) -> None:
        self.filming.recorder.add(self.key, frame)

    def finish(self) -> str | None:
        """The video's path under the run directory once it is in place (before the record that
        names it exists: a kill between the two runs the episode again), None if not written."""
        return self.filming.plan.relpath(self.unit) if self.filming.recorder.finish(self.key) else None

    def drop(self) -> None:
        """The episode did not end (an error, a cancel): its partial video goes."""
        self.filming.recorder.drop(self.key)


_render_warned: set[str] = set()


def grab_frame(env: Any, label: str, size: int = DEFAULT_VIDEO_SIZE) -> Any:
    """The env's video frame (`benchmarks.frames.video_frame`: its `render_video(size)`, else
    `render()`), or None (warned once per task) when the env cannot render."""
    if getattr(env, "render_mode", None) != "rgb_array":
        if label not in _render_warned:
            _render_warned.add(label)
            log.warning("%s: env has no rgb_array rendering; no video", label)
        return None
    try:
        return video_frame(env, size)
    except Exception as err:  # a video must never take an episode down
        if label not in _render_warned:
            _render_warned.add(label)
            log.warning("%s: rendering failed (%s: %s); no video", label, type(err).__name__, err)
        return None


def vector_frames(vec: Any, label: str, size: int) -> Callable[[list[int]], list[Any]]:
    """rows -> the video frames of those envs of the vector env `vec` (a sync one's envs each,
    an async one's in one call: it renders all of its envs)."""
    envs = getattr(vec, "envs", None)
    if envs is not None:
        return lambda rows: [grab_frame(envs[i], label, size) for i in rows]
    try:
        # a sub-process dies on a call its env cannot answer: ask first, once per batch
        video = all(vec.call("has_wrapper_attr", RENDER_VIDEO))
    except Exception:
        return lambda rows: [None] * len(rows)

    def frames(rows: list[int]) -> list[Any]:
        if not rows:
            return []
        try:
            all_frames = vec.call(RENDER_VIDEO, size) if video else vec.call("render")
        except Exception as err:
            # gymnasium shuts down a sub-process that raised: its envs cannot step on, so the
            # batch stops here with the reason, not at the next step with a closed pipe's
            hint = gl_failure_hint(str(err), os.environ.get("MUJOCO_GL", ""))
            raise WorkerError(
                f"an env sub-process (--eval.use_async_envs=true) failed to film {label}'s video: {error_line(err)}"
                + (f"; {hint}" if hint else "; --eval.max_episodes_rendered=0 turns videos off")
            ) from None
        return [all_frames[i] for i in rows]

    return frames


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
