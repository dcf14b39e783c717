"""A killed run never leaves a logged episode whose video is missing (issue 46, item 8): a
video is in place before the record that names it is made, so a SIGKILL of the whole process
group at any moment leaves every logged episode's video on disk; a resume films what is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, load_info, run_subprocess, subprocess_env

FLAGS = ("--env.type=fake", "--policy.type=random", "--eval.n_episodes=6", "--eval.max_episodes_rendered=6",
         "--eval.video_size=256", "--eval.report=false")


def _logged(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in out.glob("episodes/*.jsonl") for line in f.read_text().splitlines()
            if line.endswith("}")]


@pytest.mark.parametrize("mode", [["--workers=2"], ["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.isolation=none"]],
                         ids=["workers", "lockstep"])
def test_every_logged_video_is_on_disk_after_a_kill(tmp_path: Path, mode: list[str]) -> None:
    for after in (2, 7):
        out = tmp_path / f"kill{after}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rollbench", "eval", *FLAGS, *mode, f"--output_dir={out}"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=subprocess_env(), cwd=REPO,
        )
        deadline = time.monotonic() + 120
        while len(_logged(out)) < after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its workers and their encoders at once
        proc.wait()
        logged = _logged(out)
        assert len(logged) >= after, proc.stderr.read() if proc.stderr else ""
        named = [r["video_path"] for r in logged if r.get("video_path")]
        assert named and all((out / p).is_file() for p in named), [p for p in named if not (out / p).is_file()]
        res = run_subprocess("eval", *FLAGS, *mode, f"--output_dir={out}")
        assert res.rc == 0, res.err
        assert "not on disk" not in res.err
        videos = [p for t in load_info(out)["per_task"] for p in t["metrics"]["video_paths"]]
        assert len(videos) == 18 and all((out / p).is_file() for p in videos)  # 3 tasks x 6, every one filmed


def test_merge_says_when_a_logged_video_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_subprocess("eval", *FLAGS, "--workers=1", f"--output_dir={out}").rc == 0
    (out / "videos" / "all_0" / "episode_3.mp4").unlink()  # e.g. deleted by hand, or a run before this fix
    res = run_subprocess("merge", str(out))
    assert res.rc == 0
    assert "1 videos named in the episode logs are not on disk (e.g. videos/all_0/episode_3.mp4)" in res.err
