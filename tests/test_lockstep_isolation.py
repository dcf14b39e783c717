"""Lockstep mode steps its envs in env workers: a segfault, a SIGKILL, a hang or an error
inside an env costs only its own episode, and every other episode equals a clean run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_info, per_episode, run_subprocess

# a lockstep-only policy whose actions depend on the steps since the batch's reset
BASE = ["eval", "--env.type=faulty", "--env.task=near,mid", "--eval.n_episodes=8", "--eval.batch_size=4",
        "--policy.type=module", "--policy.path=helpers_sched:per_task_counter_policy", "--workers=2"]


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for f in (out / "episodes").glob("*.jsonl") for line in f.read_text().splitlines()]


def test_segfault_kill_hang_and_error_cost_only_their_episodes(tmp_path: Path) -> None:
    clean = run_subprocess(*BASE, f"--output_dir={tmp_path / 'clean'}", ROLLBENCH_PLUGINS="faulty_bench")
    assert clean.rc == 0, clean.err
    faulty = run_subprocess(
        *BASE, "--env.crash_seed=1002", "--env.segv_seed=1003", "--env.hang_seed=1005", "--env.error_seed=1006",
        "--eval.max_retries=1", "--eval.step_timeout_s=2", f"--output_dir={tmp_path / 'faulty'}",
        ROLLBENCH_PLUGINS="faulty_bench", timeout=300,
    )
    assert faulty.rc == 1, faulty.err  # the run completes, and says that some episodes failed
    info = load_info(tmp_path / "faulty")
    assert info["mode"] == "lockstep" and info["scheduling"]["isolation"] == "process"
    ref, got = per_episode(tmp_path / "clean"), per_episode(tmp_path / "faulty")
    assert len({o[1] for o in ref.values()}) > 4  # the episodes differ: equality below means something
    bad = {k for k in ref if k[2] in (2, 3, 5, 6)}
    assert len(bad) == 8
    # every other episode, also those that shared a batch or a worker with a bad one
    assert set(got) == set(ref) - bad
    assert got == {k: ref[k] for k in got}
    causes = {(t["task"], f["episode_index"]): f["error"] for t in info["per_task"] for f in t["failed"]}
    for task in ("near", "mid"):
        assert "SIGKILL" in causes[(task, 2)] and "goodbye from stderr" in causes[(task, 2)]
        assert "SIGSEGV" in causes[(task, 3)]
        assert "step_timeout_s" in causes[(task, 5)] and "hang" in causes[(task, 5)]
        assert "RuntimeError: faulty env: injected error" in causes[(task, 6)]
    lines = _lines(tmp_path / "faulty")
    keys = [(r["task_group"], r["task_id"], r["episode_index"]) for r in lines]
    assert len(keys) == len(set(keys)) == 16  # each episode logged once
    assert all(r["attempt"] == 1 for r in lines if r["status"] == "failed")  # 1 + --eval.max_retries tries
    # the worker of episode 2 also ran episode 0 of its batch: run again without penalty
    assert {r["attempt"] for r in lines if r["episode_index"] == 0} == {0}


def test_a_crash_in_the_same_process_ends_the_run(tmp_path: Path) -> None:
    """--eval.isolation=none keeps lerobot-eval's one process: the crash takes the run down;
    what finished before it is in the log, equal to a clean run's."""
    out = tmp_path / "here"
    r = run_subprocess(*BASE, "--eval.isolation=none", "--env.crash_seed=1005", f"--output_dir={out}",
                       ROLLBENCH_PLUGINS="faulty_bench", timeout=120)
    assert r.rc == -9, r.err  # SIGKILL of the only process
    done = {(r["task_group"], r["task_id"], r["episode_index"]): r for r in _lines(out)}
    assert len(done) == 4  # the first batch of the first task; its second batch held the crash
    clean = run_subprocess(*BASE, f"--output_dir={tmp_path / 'clean'}", ROLLBENCH_PLUGINS="faulty_bench")
    assert clean.rc == 0, clean.err
    ref = per_episode(tmp_path / "clean")
    assert {k: (r["success"], r["sum_reward"], r["max_reward"], r["n_steps"], r["seed"]) for k, r in done.items()} == {
        k: ref[k] for k in done
    }


@pytest.mark.pusht
def test_pixels_and_videos_from_env_workers_equal_the_same_process(tmp_path: Path) -> None:
    base = ["eval", "--env.type=pusht", "--env.episode_length=12", "--policy.type=module",
            "--policy.path=helpers_sched:image_mean_policy", "--eval.mode=lockstep", "--eval.n_episodes=3",
            "--eval.batch_size=2", "--eval.max_episodes_rendered=2"]
    a = run_subprocess(*base, "--workers=2", f"--output_dir={tmp_path / 'a'}")
    b = run_subprocess(*base, "--eval.isolation=none", f"--output_dir={tmp_path / 'b'}")
    assert a.rc == 0 and b.rc == 0, a.err + b.err
    assert per_episode(tmp_path / "a") == per_episode(tmp_path / "b")
    assert len({o[1] for o in per_episode(tmp_path / "a").values()}) == 3
    for out in ("a", "b"):
        videos = load_info(tmp_path / out)["overall"]["video_paths"]
        assert len(videos) == 2 and all((tmp_path / out / v).stat().st_size > 0 for v in videos)


def test_isolation_flag_rules(tmp_path: Path) -> None:
    r = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.mode=continuous",
                       "--eval.isolation=none", f"--output_dir={tmp_path / 'x'}")
    assert r.rc == 2 and "--eval.isolation=none" in r.err and "--eval.mode=lockstep" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.isolation=maybe",
                       f"--output_dir={tmp_path / 'y'}")
    assert r.rc == 2 and "--eval.isolation" in r.err and "process" in r.err and "none" in r.err
    # auto with isolation=none: everything in this process, so lockstep mode, no workers
    r = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=2",
                       "--eval.isolation=none", f"--output_dir={tmp_path / 'z'}")
    assert r.rc == 0, r.err
    info = load_info(tmp_path / "z")
    assert info["mode"] == "lockstep" and info["scheduling"]["workers"] == 0
    assert not list((tmp_path / "z" / "logs").glob("worker-*.log"))
