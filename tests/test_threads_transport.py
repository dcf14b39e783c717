"""`--executor=threads` (tests/threads_transport.py, a transport written from
docs/adding_an_executor.md alone): the episodes of the local executor, a complete
eval_info.json, a resume, and no worker thread left behind."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, load_info, per_episode, run_subprocess, subprocess_env

PLUGIN = {"ROLLBENCH_PLUGINS": "threads_transport"}
NOISY = ("eval", "--env.type=fake", "--env.task=near,mid,far", "--policy.type=random", "--eval.n_episodes=5",
         "--env.max_steps=12", "--eval.max_episodes_rendered=0", "--eval.report=false")

# runs the CLI in a process of its own, then names the threads still alive in it
IN_PROCESS = """
import sys, threading
from rollbench.cli import main
rc = main(sys.argv[1:])
print("THREADS", sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()))
sys.exit(rc)
"""


def threads_run(*flags: str) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS, *NOISY, "--executor=threads", "--workers=2", *flags],
                          capture_output=True, text=True, timeout=120, env=subprocess_env(**PLUGIN), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def test_a_thread_transport_gives_the_episodes_of_the_local_executor(tmp_path):
    local = run_subprocess(*NOISY, "--executor=local", "--eval.mode=continuous", "--workers=2",
                           f"--output_dir={tmp_path / 'local'}", timeout=120)
    assert local.rc == 0, local.err
    expected = per_episode(tmp_path / "local")
    assert len(expected) == 15
    assert len({r[1] for r in expected.values()}) > 10, "a test that cannot tell episodes apart"
    local_calls = load_info(tmp_path / "local")["policy_calls"]

    # worker: one slot each (a cheap policy); driver: 3 slots each, as asked, so both workers run
    for placement, workers, slots in (("worker", 2, 1), ("driver", 2, 3)):
        out = tmp_path / placement
        asked = ["--slots_per_worker=3"] if placement == "driver" else []
        stdout, _ = threads_run(f"--policy.placement={placement}", *asked, f"--output_dir={out}")
        assert "15 episodes run (continuous mode, workers in threads)" in stdout
        assert "rollbench-w" not in stdout.split("THREADS", 1)[1], "a worker thread outlived the run"
        assert per_episode(out) == expected, placement  # success, rewards, steps, seed: bit for bit

        info = load_info(out)
        assert info["status"] == "complete" and info["missing_units"] == [] and info["n_planned"] == 15
        assert info["mode"] == "continuous" and "--executor=threads" in info["command"]
        s = info["scheduling"]
        assert (s["placement"], s["workers"], s["slots_per_worker"]) == (placement, workers, slots)
        assert info["executor"] == {"name": "threads", "counts": {"worker_deaths": 0, "requeued_units": 0}}
        assert info["policy_calls"]["rows"] == local_calls["rows"]
        assert [(t["n_episodes"], t["failed"]) for t in info["per_task"]] == [(5, [])] * 3

    # what --executor=threads wrote resumes: a second run finds every episode done
    again = run_subprocess(*NOISY, "--executor=threads", "--workers=2", f"--output_dir={tmp_path / 'worker'}",
                           timeout=120, **PLUGIN)
    assert again.rc == 0, again.err
    assert "0 episodes run (continuous mode, workers in threads)" in again.out
