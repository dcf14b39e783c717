"""Where a run's episode videos lie and what they need: the frame spacing (`steps_per_frame`),
the videos records name that are not on disk (`missing`), and the encoder's
check (`check_encoder`). Filming itself (plan, recorder, frames) is `episode/video.py`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rollbench.errors import ConfigError
from rollbench.results.log import EPISODES_DIR
from rollbench.results.records import EpisodeRecord


def steps_per_frame(fps: int, video_fps: int) -> int:
    """Steps between two video frames: as many as keep `video_fps` frames per second of
    simulated time (the benchmark runs `fps` steps per second), at least 1."""
    return max(1, fps // max(1, video_fps))


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
