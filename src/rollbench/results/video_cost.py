"""What a run's videos will cost, said before it starts when that is much of the run.

A cheap estimate, nothing measured, so it adds nothing to start-up: the benchmark's rough
cost of an env step (`BenchmarkConfig.step_cost_ms`) and of a video frame
(`BenchmarkConfig.video_frame_ms`, at `--eval.video_size`), H.264 encoding, and the frames
the video plan takes (the reset, every k-th step, the last), over the planned episodes at
their step limits. Both sides grow with the episodes' length, so the share is about right
though the seconds are upper bounds (episodes that succeed stop early). Not counted: a
video renderer's set-up per env (0.1-0.4 s for MetaWorld on llvmpipe) and start-up.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rollbench.config.run import RunConfig
from rollbench.plan import EpisodeUnit
from rollbench.results.video import steps_per_frame

log = logging.getLogger(__name__)

#: videos taking more than this share of a run's work are announced before it starts
SMALL_SHARE = 0.25
#: x264 (preset veryfast, one thread) per million pixels of a frame: 1.0 ms per 384² frame here
ENCODE_MS_PER_MPIXEL = 6.8


@dataclass(frozen=True)
class VideoCost:
    """Upper bounds on one core (CPU-seconds), from the planned episodes at their step limits."""

    filmed: int  # episodes with a video
    frames: int  # video frames, at most
    frame_ms: float  # one frame: render + encode
    video_s: float  # all video frames
    eval_s: float  # every env step of the run, without videos

    @property
    def share(self) -> float:
        """The videos' share of the run's work."""
        total = self.video_s + self.eval_s
        return self.video_s / total if total > 0 else 0.0

    def message(self, cfg: RunConfig, parallel: int) -> str:
        e, n = cfg.eval, max(1, parallel)
        ratio = self.video_s / self.eval_s if self.eval_s > 0 else math.inf
        return (
            f"videos will cost about {ratio:.1f}x the evaluation itself ({self.share:.0%} of this run's work): "
            f"{self.filmed} episodes filmed (--eval.max_episodes_rendered={e.max_episodes_rendered} per task), "
            f"up to {self.frames} frames at {e.video_size} px, {e.video_fps} fps, ~{self.frame_ms:.0f} ms each, "
            f"at most +{self.video_s / n:.0f} s on {n} process{'es' if n > 1 else ''}. "
            f"--eval.max_episodes_rendered=0 turns them off; fewer episodes or a lower --eval.video_fps costs less"
        )


def estimate(cfg: RunConfig, units: Sequence[EpisodeUnit]) -> VideoCost | None:
    """The cost of `units`' videos under `cfg`; None when nothing is filmed."""
    e, bench = cfg.eval, cfg.env
    if e.max_episodes_rendered == 0:
        return None
    every = steps_per_frame(bench.fps, e.video_fps)
    frame_ms = bench.video_frame_ms(e.video_size) + ENCODE_MS_PER_MPIXEL * e.video_size**2 / 1e6
    limits: dict[str, int] = {}
    steps = frames = filmed = 0
    for unit in units:
        if unit.task not in limits:
            limits[unit.task] = bench.effective_max_steps(unit.task)
        length = limits[unit.task]
        steps += length
        if unit.episode_index < e.max_episodes_rendered:
            filmed += 1
            frames += 1 + math.ceil(length / every)
    if not filmed:
        return None
    return VideoCost(filmed, frames, frame_ms, frames * frame_ms / 1000, steps * bench.step_cost_ms / 1000)


def warn_if_costly(cfg: RunConfig, units: Sequence[EpisodeUnit], parallel: int) -> VideoCost | None:
    """Log a warning when the videos of `units` would be more than a small share of the run
    (`SMALL_SHARE`), with what turns them off. `parallel`: processes that step envs."""
    cost = estimate(cfg, units)
    if cost is not None and cost.share > SMALL_SHARE:
        log.warning("%s", cost.message(cfg, parallel))
    return cost
