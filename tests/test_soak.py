"""A short kill soak (bench/soak.py's logic, a handful of kills) and a full disk.

Worker processes SIGKILLed at random moments, and whole process groups SIGKILLed and the
same command rerun, leave every episode logged exactly once with a clean run's results.
A disk that fills up (a real tmpfs where this machine lets us mount one, else a failing
write(2)/fsync(2) in the log's write path) stops the run with one line that names the
output directory, keeps the log whole up to the last fsync, and a rerun resumes.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from conftest import REPO, per_episode, run_subprocess
from rollbench.results import log as episode_log
from rollbench.results.log import EpisodeLog, read_records
from rollbench.results.records import EpisodeRecord

pytestmark = pytest.mark.slow


def _load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", REPO / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


soak = _load_soak()


def new_soak(tmp_path: Path, seed: int, min_worker_age_s: float) -> object:
    return soak.Soak(tmp_path, random.Random(seed), min_worker_age_s=min_worker_age_s, tear=1.0,
                     say=lambda msg: None, timeout_s=240)


def assert_clean(row: object, worker_kills: int, group_kills: int) -> None:
    c = row.check
    assert (row.worker_kills, row.group_kills) == (worker_kills, group_kills), (row.notes, row.failures)
    assert not row.failures, row.failures
    assert c.compared > 0
    assert (c.lost, c.duplicated, c.mismatched, c.extra, c.failed_records) == (0, 0, 0, 0, 0), c.examples
    assert c.videos_checked > 0 and c.videos_bad == 0, c.examples
    assert row.survivors == 0
    assert row.torn_unreported == 0  # every torn last line was skipped with a warning by the next run


@pytest.mark.parametrize("mode", ["continuous", "lockstep"])
def test_killed_workers_and_groups_lose_nothing(tmp_path: Path, mode: str) -> None:
    s = new_soak(tmp_path, seed=1, min_worker_age_s=1.0)
    row = soak.soak_one(s, soak.WORKLOADS["fake"], mode, worker_kills=3, group_kills=3)
    assert_clean(row, 3, 3)


@pytest.mark.metaworld
def test_metaworld_killed_workers_and_groups_lose_nothing(tmp_path: Path) -> None:
    s = new_soak(tmp_path, seed=2, min_worker_age_s=1.0)
    # 80 episodes: about 3 s of stepping on 2 cores, long enough for a worker to be killed
    row = soak.soak_one(s, soak.WORKLOADS["metaworld"].with_episodes(40), "continuous", worker_kills=2, group_kills=2)
    assert_clean(row, 2, 2)


# -- the checker itself: each kind of damage is seen ---------------------------------------------
@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    s = new_soak(tmp_path_factory.mktemp("soak-ref"), seed=0, min_worker_age_s=1.0)
    ref = soak.reference_run(s, soak.WORKLOADS["fake"], "continuous")
    return s.workdir / "fake-continuous-reference", ref


def _lines(out: Path) -> tuple[Path, list[str]]:
    (path,) = (out / "episodes").glob("*.jsonl")
    return path, path.read_text().splitlines()


@pytest.mark.parametrize("damage", ["lose", "duplicate", "change", "break_video"])
def test_the_soak_sees_lost_duplicated_changed_episodes_and_bad_videos(tmp_path: Path, finished, damage: str) -> None:
    src, ref = finished
    out = tmp_path / "out"
    shutil.copytree(src, out)
    assert soak.compare(out, ref).clean
    path, lines = _lines(out)
    if damage == "lose":
        path.write_text("\n".join(lines[1:]) + "\n")
    elif damage == "duplicate":
        path.write_text("\n".join([*lines, lines[3]]) + "\n")
    elif damage == "change":
        rec = json.loads(lines[2])
        rec["sum_reward"] += 1.0
        path.write_text("\n".join([*lines[:2], json.dumps(rec), *lines[3:]]) + "\n")
    else:
        video = out / soak.listed_videos(out)[0]
        video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    got = soak.compare(out, ref)
    assert not got.clean
    want = {"lose": "lost", "duplicate": "duplicated", "change": "mismatched", "break_video": "videos_bad"}[damage]
    assert getattr(got, want) == 1


# -- a full disk ---------------------------------------------------------------------------------
FAKE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=6", "--eval.report=false")


@pytest.fixture(scope="module")
def fake_reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("disk-ref")
    res = run_subprocess(*FAKE, f"--output_dir={out}")
    assert res.rc == 0, res.err
    return per_episode(out)


def _every_line_a_record(out: Path) -> list[EpisodeRecord]:
    lines = [line for p in (out / "episodes").glob("*.jsonl") for line in p.read_text().split("\n") if line]
    for p in (out / "episodes").glob("*.jsonl"):
        assert p.read_text().endswith("\n")  # no half record left behind
    return [EpisodeRecord.from_json(json.loads(line)) for line in lines]


def _assert_disk_full_error(err: str, out: Path) -> None:
    last = err.strip().splitlines()[-1]
    assert last.startswith("rollbench: error: the disk of ") and "is full" in last, err
    assert f"--output_dir={str(out)!r}" in last and "No space left on device" in last
    assert "run the same command again to resume" in last
    assert "Traceback" not in err


def test_a_failed_write_leaves_the_log_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = EpisodeRecord("all", 0, "near", 0, 1000, True, -1.0, -0.5, 3)
    with EpisodeLog(tmp_path, "w") as log:
        log.append(rec)
        before = log.path.read_bytes()

        def half_then_full(fd: int, data: bytes) -> int:
            monkeypatch.setattr(episode_log, "_write", full)
            return os.write(fd, bytes(data[: len(data) // 2]))

        def full(fd: int, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(episode_log, "_write", half_then_full)
        with pytest.raises(OSError) as caught:
            log.append(rec)
        assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(log.path)
        assert log.path.read_bytes() == before
    assert [r.outcome() for r in read_records(tmp_path)] == [rec.outcome()]


@pytest.mark.parametrize("fails", ["write", "fsync"])
def test_a_full_disk_stops_with_one_line_and_the_rerun_resumes(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_reference: dict, fails: str,
) -> None:
    """The driver writes the log, so the disk fills in this process: after 5 records, the
    6th write gets half its line onto the disk (or all of it, and fsync fails)."""
    written = []
    real_write, real_fsync = episode_log._write, os.fsync

    def write(fd: int, data: bytes) -> int:
        if len(written) < 5 or fails == "fsync":
            written.append(fd)
            return real_write(fd, data)
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fsync(fd: int) -> None:
        if fails == "fsync" and len(written) > 5 and "/episodes/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(episode_log, "_write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    args = (*FAKE, "--eval.mode=continuous", f"--output_dir={tmp_path}")
    res = cli(*args)
    assert res.rc == 1, res.err
    _assert_disk_full_error(res.err, tmp_path)
    assert "5 of 18 episodes are saved" in res.err
    kept = _every_line_a_record(tmp_path)
    assert len(kept) == 5
    assert all(fake_reference[r.key] == (r.success, r.sum_reward, r.max_reward, r.n_steps, r.seed) for r in kept)
    monkeypatch.undo()  # space is back
    res = cli(*args)
    assert res.rc == 0, res.err
    assert "13 episodes run" in res.out
    assert per_episode(tmp_path) == fake_reference
    keys = [r.key for r in _every_line_a_record(tmp_path)]
    assert sorted(keys) == sorted(fake_reference)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (needs root and a kernel that lets this container mount one)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_really_full_disk_stops_cleanly_and_resumes_once_space_is_back(tmp_path: Path, small_disk: Path) -> None:
    args = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=40", "--eval.report=false",
            "--eval.mode=continuous")
    res = run_subprocess(*args, f"--output_dir={tmp_path / 'reference'}")
    assert res.rc == 0, res.err
    st = os.statvfs(small_disk)
    filler = small_disk / "filler"
    # 6 pages left: run.json, the workers' logs and some 20 of the 120 records (~340 bytes each)
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 6 * 4096))
    out = small_disk / "out"
    res = run_subprocess(*args, f"--output_dir={out}")
    assert res.rc == 1, res.err
    _assert_disk_full_error(res.err, out)
    kept = _every_line_a_record(out)
    assert 0 < len(kept) < 120
    filler.unlink()
    res = run_subprocess(*args, f"--output_dir={out}")
    assert res.rc == 0, res.err
    assert f"{120 - len(kept)} episodes run" in res.out
    assert per_episode(out) == per_episode(tmp_path / "reference")
    assert sorted(r.key for r in _every_line_a_record(out)) == sorted(per_episode(out))
