"""One run owns its output directory while it writes (`results/owners.py`): a second, different
run is refused in one line naming the first's pid and host; an identical one too (it would run
every episode again); shards of one run and a launcher's children share it; a killed owner's
claim dies with it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, load_info, per_episode, run_subprocess, subprocess_env
from helpers_owners import claim_after, claim_and_wait, writer
from rollbench.errors import ConfigError
from rollbench.results import owners, store

FAKE = ("--env.type=fake", "--policy.type=expert", "--eval.n_episodes=10", "--workers=1")
HOST = socket.gethostname().split(".")[0]


def _start(out: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rollbench", "eval", *FAKE, "--eval.max_episodes_rendered=0", "--eval.report=false",
         f"--output_dir={out}", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO,
    )


def _wait_claimed(out: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not owners.any_live(out):
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the first run never claimed {out}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)


def test_runs_that_open_a_directory_at_once_take_turns(tmp_path: Path) -> None:
    """The race the check-then-write of run.json had, made as likely as it gets: four processes
    released by one barrier prepare one new directory with four different runs."""
    ctx = mp.get_context("forkserver")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=claim_after, args=(barrier, str(tmp_path / "run"), 0.5 * (i + 1), results))
             for i in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    winners = [pid for pid, err in got if err is None]
    assert len(winners) == 1, got
    for _, err in got:
        if err is not None:  # refused, naming the winner while it was alive, or its run.json once it was gone
            assert f"pid {winners[0]} on host {HOST}" in err or "holds a different run" in err, err
            assert "\n" not in err


def test_a_different_run_started_on_a_running_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _start(out, "--policy.action_noise=0.5", "--env.step_sleep_s=0.05")  # 30 s: the others start meanwhile
    try:
        _wait_claimed(out, first)
        with ThreadPoolExecutor(2) as pool:
            second_run = pool.submit(run_subprocess, "eval", *FAKE, "--policy.action_noise=1.5", f"--output_dir={out}",
                                     "--eval.report=false")
            # --resume=false would set the first run's episodes aside under it
            third_run = pool.submit(run_subprocess, "eval", *FAKE, "--policy.action_noise=1.5", f"--output_dir={out}",
                                    "--resume=false", "--eval.report=false")
            second, third = second_run.result(), third_run.result()
        assert first.poll() is None, "the first run ended before the others were refused: the test says nothing"
        assert first.wait(300) == 0, first.communicate()[1][-2000:]
    finally:
        first.kill()
    for res in (second, third):
        assert res.rc == 2, res.err
        assert f"pid {first.pid} on host {HOST}" in res.err
        assert len(res.err.strip().splitlines()) == 1, res.err
    assert "policy.options.action_noise: '0.5' there, '1.5' here" in second.err
    solo = tmp_path / "solo"
    assert run_subprocess("eval", *FAKE, "--policy.action_noise=0.5", f"--output_dir={solo}",
                          "--eval.report=false").rc == 0
    assert per_episode(out) == per_episode(solo)
    assert load_info(out)["overall"]["pc_success"] == load_info(solo)["overall"]["pc_success"]
    assert not list((out / owners.OWNERS_DIR).iterdir())  # released at the end


def test_the_same_run_started_twice_is_refused(tmp_path: Path) -> None:
    """Before: the second resumed beside the first, and both ran every episode."""
    out = tmp_path / "run"
    first = _start(out, "--env.step_sleep_s=0.05")
    try:
        _wait_claimed(out, first)
        second = run_subprocess("eval", *FAKE, "--env.step_sleep_s=0.05", f"--output_dir={out}", "--eval.report=false")
        assert first.poll() is None, "the first run ended before the second was refused: the test says nothing"
        assert first.wait(300) == 0
    finally:
        first.kill()
    assert second.rc == 2, second.err
    assert f"the same run; both would run every episode: pid {first.pid} on host {HOST}" in second.err
    logs = list((out / "episodes").glob("*.jsonl"))
    assert len(logs) == 1 and len(logs[0].read_text().splitlines()) == 30  # 3 tasks x 10, once


def test_shards_of_one_run_share_a_directory(tmp_path: Path) -> None:
    """The documented way for several machines: one shared directory, a shard id each."""
    out = tmp_path / "run"
    shards = [_start(out, "--env.step_sleep_s=0.01", "--eval.num_shards=2", f"--eval.shard_id={k}") for k in (0, 1)]
    errs = [p.communicate(timeout=180)[1] for p in shards]
    assert [p.returncode for p in shards] == [0, 0], errs
    merged = run_subprocess("merge", str(out))
    assert merged.rc == 0, merged.err
    info = load_info(out)
    assert info["status"] == "complete" and info["overall"]["n_episodes"] == 30
    # ...but not a shard of another split (its units overlap both)
    first = _start(out / "again", "--env.step_sleep_s=0.1", "--eval.num_shards=2", "--eval.shard_id=0")
    try:
        _wait_claimed(out / "again", first)
        other = run_subprocess("eval", *FAKE, "--env.step_sleep_s=0.1", "--eval.num_shards=3", "--eval.shard_id=1",
                               f"--output_dir={out / 'again'}")
    finally:
        first.kill()
        first.wait()
    assert other.rc == 2 and f"pid {first.pid}" in other.err, other.err


def test_a_killed_owner_leaves_no_claim(tmp_path: Path) -> None:
    ctx = mp.get_context("forkserver")
    ready = ctx.Event()
    proc = ctx.Process(target=claim_and_wait, args=(str(tmp_path), ready))
    proc.start()
    assert ready.wait(300)
    with pytest.raises(ConfigError, match=f"pid {proc.pid} on host"):
        store.prepare(tmp_path, {}, writer({"x": 2}))
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert not owners.any_live(tmp_path)
    _, claim = store.prepare(tmp_path, {}, writer({"x": 1}))  # the same run, resumed
    assert [p.name for p in (tmp_path / owners.OWNERS_DIR).iterdir()] == [f"{owners.host()}-{os.getpid()}.json"]
    claim.release()
    assert not list((tmp_path / owners.OWNERS_DIR).iterdir())
