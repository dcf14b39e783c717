"""Resume: a run killed (SIGKILL), torn mid-write or interrupted (Ctrl-C) and run again
ends with exactly the uninterrupted results, every unit logged once; a different run in
the same directory is refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, load_info, per_episode, run_subprocess, subprocess_env
from rollbench.results.log import EpisodeLog, read_records
from rollbench.results.records import EpisodeRecord

BASE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=6")
# one env at a time, 20 ms a step: about 3 s of work, slow enough to stop part-way
SLOW = (*BASE, "--env.step_sleep_s=0.02", "--eval.batch_size=1")
N_UNITS = 18


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("reference")
    res = run_subprocess(*BASE, "--eval.mode=lockstep", f"--output_dir={out}")
    assert res.rc == 0, res.err
    return per_episode(out)


def log_lines(out: Path) -> list[str]:
    return [line for p in sorted((out / "episodes").glob("*.jsonl")) for line in p.read_text().splitlines()]


def records_per_unit(out: Path) -> Counter:
    keys = []
    for line in log_lines(out):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line is not a logged episode
        keys.append((rec["task_group"], rec["task_id"], rec["episode_index"]))
    return Counter(keys)


def start_and_stop(args: tuple[str, ...], out: Path, sig: int, after_lines: int) -> tuple[int, str, int]:
    """Start `rollbench ARGS`, send `sig` once the log holds `after_lines` lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollbench", *args, f"--output_dir={out}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "episodes").exists() and len(log_lines(out)) >= after_lines:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"the run ended before it could be stopped: {proc.communicate()}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, len(log_lines(out))


@pytest.mark.parametrize("mode", ["lockstep", "continuous"])
def test_sigkill_then_rerun_gives_the_uninterrupted_results(tmp_path: Path, reference: dict, mode: str) -> None:
    args = (*SLOW, f"--eval.mode={mode}")
    rc, _, logged = start_and_stop(args, tmp_path, signal.SIGKILL, after_lines=4)
    assert rc == -signal.SIGKILL
    assert 4 <= logged < N_UNITS  # really killed part-way
    res = run_subprocess(*args, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "resuming" in res.err
    assert per_episode(tmp_path) == reference
    # nothing logged before the kill ran again: every unit is in the logs exactly once
    counts = records_per_unit(tmp_path)
    assert set(counts) == set(reference)
    assert set(counts.values()) == {1}
    assert load_info(tmp_path)["duplicates_ignored"] == 0


def test_a_torn_last_line_resumes_with_a_warning(tmp_path: Path, reference: dict) -> None:
    args = (*BASE, "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert run_subprocess(*args).rc == 0
    (log,) = (tmp_path / "episodes").glob("*.jsonl")
    lines = log.read_text().splitlines()
    # a crash after 10 episodes, in the middle of writing the 11th
    log.write_text("\n".join(lines[:10]) + "\n" + lines[10][: len(lines[10]) // 2])
    res = run_subprocess(*args)
    assert res.rc == 0, res.err
    assert "torn last line" in res.err
    assert "8 episodes run" in res.out  # the torn one and the 7 after it, nothing else
    assert per_episode(tmp_path) == reference
    assert set(records_per_unit(tmp_path).values()) == {1}


def test_a_reused_writer_file_keeps_records_after_a_torn_line(tmp_path: Path) -> None:
    # a restarted container may hand the rerun the same pid, hence the same log file name
    rec = EpisodeRecord("all", 0, "near", 0, 1000, True, -1.0, -0.5, 3)
    path = tmp_path / "episodes" / "w.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(rec.to_json())[:40])
    with EpisodeLog(tmp_path, "w") as log:
        log.append(rec)
    (got,) = read_records(tmp_path)
    assert got.outcome() == rec.outcome()


@pytest.mark.parametrize(
    ("change", "diff"),
    [
        ("--seed=1001", "seed: 1000 in the log, 1001 now"),
        ("--eval.n_episodes=7", "n_episodes: 6 in the log, 7 now"),
        ("--env.task=near", "env.task: 'all' in the log, 'near' now"),
    ],
)
def test_a_different_run_in_the_same_dir_is_refused(cli, tmp_path: Path, change: str, diff: str) -> None:
    assert cli(*BASE, "--eval.mode=lockstep", f"--output_dir={tmp_path}").rc == 0
    before = log_lines(tmp_path)
    flags = [a for a in BASE if not a.startswith(change.split("=")[0])]
    res = cli(*flags, change, "--eval.mode=lockstep", f"--output_dir={tmp_path}")
    assert res.rc == 2
    assert "holds a different run" in res.err and diff in res.err and "--resume=false" in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert log_lines(tmp_path) == before


def test_resume_false_starts_over(cli, tmp_path: Path) -> None:
    assert cli(*BASE, "--eval.mode=lockstep", f"--output_dir={tmp_path}").rc == 0
    res = cli(*BASE, "--eval.mode=lockstep", "--seed=2000", "--resume=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert f"{N_UNITS} episodes run" in res.out
    assert sorted({v[4] for v in per_episode(tmp_path).values()}) == list(range(2000, 2006))
    assert len(log_lines(tmp_path)) == N_UNITS
    # the old episodes are set aside, not deleted
    (old,) = tmp_path.glob(".episodes-discarded-*")
    assert len(list(old.glob("*.jsonl"))) == 1


def test_ctrl_c_stops_cleanly_and_resumes(tmp_path: Path, reference: dict) -> None:
    args = (*SLOW, "--eval.mode=lockstep")
    rc, err, logged = start_and_stop(args, tmp_path, signal.SIGINT, after_lines=3)
    assert rc == 130, err
    assert "interrupted" in err and "run the same command again to resume" in err
    assert "Traceback" not in err
    assert 3 <= logged < N_UNITS
    res = run_subprocess(*args, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert f"{N_UNITS - logged} episodes run" in res.out
    assert per_episode(tmp_path) == reference
    assert set(records_per_unit(tmp_path).values()) == {1}


def test_leftovers_of_killed_processes_are_swept(tmp_path: Path, monkeypatch) -> None:
    """A SIGKILLed group leaves shared-memory files and half-written videos; the next run
    removes those of processes that are gone and keeps those of live ones."""
    import os
    import subprocess

    from rollbench.results.store import sweep_partial_videos
    from rollbench.scheduler import shm
    from rollbench.scheduler.pool import sweep_shm

    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setattr(shm, "shm_dir", lambda: str(tmp_path))
    monkeypatch.setattr("rollbench.scheduler.pool.shm_dir", lambda: str(tmp_path))
    dead = tmp_path / f"rollbench-{gone.pid}-123-w0.buf"
    live = tmp_path / f"rollbench-{os.getpid()}-123-w0.buf"
    for p in (dead, live):
        p.write_bytes(b"x")
    assert sweep_shm() == 1
    assert not dead.exists() and live.exists()
    videos = tmp_path / "out" / "videos" / "all_0"
    videos.mkdir(parents=True)
    half = videos / f".episode_0.mp4.{gone.pid}.tmp.mp4"
    mine = videos / f".episode_1.mp4.{os.getpid()}.tmp.mp4"
    done = videos / "episode_2.mp4"
    for p in (half, mine, done):
        p.write_bytes(b"x")
    assert sweep_partial_videos(tmp_path / "out") == 1
    assert not half.exists() and mine.exists() and done.exists()
