"""An episode's video: which episodes are filmed and which of their states become frames
(`VideoPlan`), and one frame of an env (`grab_frame`). The recorder that encodes them is
`results/video.py`'s; what filming costs a run, `results/video_cost.py`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from rollbench.benchmarks.frames import video_frame
from rollbench.config.eval import EvalConfig
from rollbench.config.run import RunConfig
from rollbench.plan import EpisodeUnit
from rollbench.results.video import steps_per_frame

DEFAULT_VIDEO_SIZE: int = EvalConfig.video_size  # the dataclass default, for callers without a config


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


_render_warned: set[str] = set()


def grab_frame(env: Any, label: str, size: int = DEFAULT_VIDEO_SIZE) -> Any:
    """The env's video frame (`benchmarks.frames.video_frame`: its `render_video(size)`, else
    `render()`), or None (warned once per task) when the env cannot render."""
    if getattr(env, "render_mode", None) != "rgb_array":
        if label not in _render_warned:
            _render_warned.add(label)
            logging.getLogger(__name__).warning("%s: env has no rgb_array rendering; no video", label)
        return None
    try:
        return video_frame(env, size)
    except Exception as err:  # a video must never take an episode down
        if label not in _render_warned:
            _render_warned.add(label)
            logging.getLogger(__name__).warning("%s: rendering failed (%s: %s); no video", label, type(err).__name__, err)
        return None
