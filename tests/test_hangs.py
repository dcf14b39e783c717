"""A policy that hangs is bounded in every placement and mode, and a worker killed between
its env calls costs no episode (issue 46, items 6 and 7).

- policy in the driver (continuous driver placement, lockstep): the run stops after
  `--eval.step_timeout_s` in one line that names the policy, the call and the episode; what
  finished is in the log, and the same command resumes;
- policy in the workers: the worker's heartbeat stops, and the episode it hung on is charged
  (failed, with the cause) while the run goes on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import load_info, per_episode, run_subprocess

# generous: a worker's start counts against --eval.step_timeout_s too, and on a loaded machine
# it took over 3 s
FAKE = ["eval", "--env.type=fake", "--eval.n_episodes=6", "--policy.type=module",
        "--policy.path=helpers_policies:hangs", "--eval.step_timeout_s=10"]
HANG_SEED = "1003"  # episode 3


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for f in (out / "episodes").glob("*.jsonl") for line in f.read_text().splitlines() if line]


def _ends_with_one_line(err: str, call: str) -> str:
    last = err.strip().splitlines()[-1]
    assert last.startswith("rollbench: error: policy 'module'"), err[-3000:]
    assert f"its {call} call" in last and "episode 3 (seed 1003)" in last and "--eval.step_timeout_s=10s" in last, last
    assert "Traceback" not in err, err[-3000:]
    return last


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        pytest.param(["--eval.mode=continuous", "--policy.placement=driver", "--workers=2", "--slots_per_worker=1"], {},
                     id="continuous"),
        pytest.param(["--eval.mode=continuous", "--policy.placement=driver", "--workers=1", "--slots_per_worker=2"],
                     {"HANG_IN": "reset"}, id="continuous-reset"),
        pytest.param(["--eval.mode=lockstep", "--eval.batch_size=2", "--workers=2"], {}, id="lockstep"),
        pytest.param(["--eval.mode=lockstep", "--eval.batch_size=2", "--eval.max_parallel_tasks=2", "--workers=2",
                      "--env.task=near,mid"], {}, id="lockstep-parallel-tasks"),
        pytest.param(["--eval.mode=continuous", "--policy.placement=driver", "--workers=2", "--slots_per_worker=1"],
                     {"HANG_HOW": "blocked"}, id="continuous-signals-blocked"),
    ],
)
def test_a_policy_that_hangs_in_the_driver_stops_the_run_in_one_line_and_a_rerun_resumes(
    tmp_path: Path, flags: list[str], env: dict[str, str],
) -> None:
    out = tmp_path / "run"
    if not any(f.startswith("--env.task=") for f in flags):
        flags = [*flags, "--env.task=near"]
    t0 = time.monotonic()
    r = run_subprocess(*FAKE, *flags, f"--output_dir={out}", timeout=240, HANG_SEED=HANG_SEED, **env)
    took = time.monotonic() - t0
    assert r.rc == 1, r.err[-3000:]
    _ends_with_one_line(r.err, env.get("HANG_IN", "act"))
    assert took < 200  # 10 s of timeout (+ 5 s of grace with signals blocked), plus start-up on a loaded machine
    first = _lines(out)
    assert first and all(rec["status"] == "ok" for rec in first)  # what finished before the hang is saved
    assert all(rec["seed"] != int(HANG_SEED) for rec in first)
    # the same command, the policy mended: only what was left runs, and the run completes
    again = run_subprocess(*FAKE, *flags, f"--output_dir={out}", timeout=240)
    assert again.rc == 0, again.err[-3000:]
    lines = _lines(out)
    keys = [(rec["task_group"], rec["task_id"], rec["episode_index"]) for rec in lines]
    assert len(keys) == len(set(keys)) == len(per_episode(out))  # each episode once: the first run's are kept
    assert all(rec in lines for rec in first)
    assert load_info(out)["status"] == "complete"


@pytest.mark.parametrize("slots", [1, 2])
def test_a_policy_that_hangs_in_a_worker_charges_its_episode_and_the_run_goes_on(tmp_path: Path, slots: int) -> None:
    """Before: the worker was replaced 4 times, the episode never charged ("made no progress
    ... 4 times in a row before running any episode"), and the run stopped."""
    out = tmp_path / "run"
    r = run_subprocess(*FAKE, "--env.task=near", "--eval.mode=continuous", "--policy.placement=worker", "--workers=1",
                       f"--slots_per_worker={slots}", "--eval.max_retries=1", f"--output_dir={out}", timeout=300,
                       HANG_SEED=HANG_SEED)
    assert r.rc == 1, r.err[-3000:]  # the run completes, and says that an episode failed
    assert "before running any episode" not in r.err
    info = load_info(out)
    assert info["status"] == "partial" and info["overall"]["n_failed"] == 1 and info["overall"]["n_episodes"] == 5
    (failed,) = [f for t in info["per_task"] for f in t["failed"]]
    assert failed["episode_index"] == 3
    assert "step_timeout_s" in failed["error"] and "in its policy's call" in failed["error"], failed["error"]
    lines = _lines(out)
    assert [rec["attempt"] for rec in lines if rec["status"] == "failed"] == [1]  # 1 + --eval.max_retries tries
    assert all(rec["attempt"] == 0 for rec in lines if rec["status"] == "ok")  # its batch-mates: no penalty
    keys = [(rec["task_group"], rec["task_id"], rec["episode_index"]) for rec in lines]
    assert len(keys) == len(set(keys)) == 6


def test_lockstep_without_retries_a_worker_killed_between_steps_costs_no_episode(tmp_path: Path) -> None:
    """The driver's policy SIGKILLs one of the two env workers while both wait for their next
    step: no episode was inside it, so its 4 rows run again in a later batch without penalty.
    Before: all 4 were charged ("killed ... while running it") and, retries off, failed."""
    base = ["eval", "--env.type=fake", "--env.task=near", "--eval.n_episodes=8", "--eval.mode=lockstep",
            "--eval.batch_size=8", "--workers=2", "--eval.max_retries=0", "--policy.type=module"]
    clean = run_subprocess(*base, "--policy.path=helpers_policies:zeros", f"--output_dir={tmp_path / 'clean'}")
    assert clean.rc == 0, clean.err[-3000:]
    out = tmp_path / "killed"
    r = run_subprocess(*base, "--policy.path=helpers_policies:kills_a_worker", f"--output_dir={out}", timeout=240)
    assert r.rc == 0, r.err[-3000:]
    info = load_info(out)
    assert info["overall"]["n_failed"] == 0 and info["status"] == "complete"
    assert per_episode(out) == per_episode(tmp_path / "clean")
    lines = _lines(out)
    assert len(lines) == 8 and all(rec["status"] == "ok" and rec["attempt"] == 0 for rec in lines)
    assert info["scheduling"]["workers"] == 2
    logs = (out / "logs" / "worker-1.log").read_text() + (out / "logs" / "worker-0.log").read_text()
    assert logs.count("starting at") == 3  # two workers, and the one in place of the killed one
