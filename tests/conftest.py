"""Shared helpers: run the real CLI (in-process or as a subprocess) and read results."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollbench.cli import main

# Mesa's llvmpipe (software GL) and triton each carry an LLVM; importing triton into a
# process that already rendered with Mesa segfaults (checked here). rollbench builds the
# policy before any env renders, but this one pytest process runs many evaluations in turn,
# so torch's lazy triton import is done first, if torch is installed at all.
try:
    import torch._dynamo  # noqa: F401  (imports triton when present)
    import torchvision  # noqa: F401
except ImportError:
    pass

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

#: the slowest modules (each takes 1.5-6 minutes of CI), run first: `make test` hands whole
#: modules to two pytest processes (--dist loadscope), and one of these started last would
#: run alone while the other process idles (longest first keeps both busy to the end)
SLOW_FIRST = (
    "test_lerobot_env_parity.py", "test_lerobot_vla.py", "test_lerobot_bridge.py", "test_lerobot_metaworld.py",
    "test_libero.py", "test_lerobot.py", "test_ray.py", "test_lerobot_types06.py", "test_lerobot_chunking.py",
)


#: LeRobot-facing tests of rollbench's own machinery (Ray, shards, kills and resumes, sweeps,
#: start-up timing, the remote dialects) with a LeRobot checkpoint:
#: nothing in them depends on the LeRobot line beyond what the tests left to the 3.11 line
#: check (the adapter and its processors, parity with lerobot-eval, LeRobot's envs through the
#: bridge, the dataset format, hub checkpoints). Marked `one_line`: `make test-311` skips them,
#: which takes about a third off that line's CI time; the 3.12 line runs them.
ONE_LINE = (
    "test_ray.py::",
    "test_remote_lerobot.py::",
    "test_sweep_images.py::",
    "test_recording_sweep.py::test_every_condition_s_episodes_are_in_the_dataset_each_naming_its_condition",
    "test_recording_sweep.py::test_an_image_axis_is_recorded_as_the_camera_gave_it",
    "test_recording_sweep.py::test_record_conditions_control_keeps_the_control_s_episodes_only",
    "test_recording.py::test_a_killed_recorded_run_resumes_to_the_clean_runs_dataset",
    "test_recording.py::test_shards_write_their_parts_and_the_launcher_joins_them",
    "test_recording.py::test_a_finished_run_keeps_its_dataset_and_not_the_parts",
    "test_recording.py::test_a_finished_run_that_keeps_more_episodes_records_them_again",
    "test_recording.py::test_an_adaptive_recorded_run_keeps_only_the_counted_prefix",
    "test_recording.py::test_record_failures_keeps_exactly_the_failed_episodes",
    "test_recording.py::test_a_recording_root_of_this_run_is_taken_again_on_rerun",
    "test_hub_checkpoints.py::test_a_moved_branch_does_not_mix_checkpoints_in_one_run",
    "test_hub_checkpoints.py::test_shard_processes_find_the_driver_s_commit",
    "test_lerobot_startup.py::test_startup_moments_in_eval_info",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest keep their order
    for item in items:
        where = f"{item.path.name}::{item.name}"
        if any(where.startswith(prefix) for prefix in ONE_LINE):
            item.add_marker(pytest.mark.one_line)


def _quiet(args: tuple[str, ...]) -> list[str]:
    """Tests render no videos and draw no report.html unless they ask: rollbench's default (4
    videos per task) would make every MetaWorld test render hundreds of CPU frames, and the
    report costs each run about a CPU second (most of it importing matplotlib) on top of a
    fake-benchmark run's two. Video and report tests pass the flag."""
    out = list(args)
    if out[:1] == ["eval"] and not any(a.startswith("--eval.max_episodes_rendered") for a in out):
        out.append("--eval.max_episodes_rendered=0")
    if out[:1] == ["eval"] and not any(a.startswith("--eval.report") for a in out):
        out.append("--eval.report=false")
    return out


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `rollbench ARGS` in this process; returns CliResult(rc, stdout, stderr)."""

    def run(*args: str) -> CliResult:
        rc = main(_quiet(args))
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run


def gl_backend() -> str:
    """The GL backend a test renders with: $MUJOCO_GL if set, else what rollbench's auto picks."""
    from rollbench.rendering import choose_backend

    return os.environ.get("MUJOCO_GL") or choose_backend("auto")


def gl_in_this_process() -> str:
    """Set the GL backend before a test builds a rendering env in the pytest process.

    MuJoCo's and dm_control's bindings read MUJOCO_GL once, at their first import, and keep
    it: one test that builds (say) a gym-aloha env first, with MUJOCO_GL unset, leaves every
    later in-process render in that xdist worker on glfw, which fails headless ("Default
    framebuffer is not complete"). Every test that renders in this process calls this first.
    """
    from rollbench.rendering import apply_backend

    backend = gl_backend()
    apply_backend(backend)
    return backend


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_subprocess(*args: str, timeout: float = 300, **env: str) -> CliResult:
    """Run `python -m rollbench ARGS` as a real process (tests/ on PYTHONPATH for plugins)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rollbench", *_quiet(args)],
        capture_output=True, text=True, timeout=timeout, env=subprocess_env(**env), cwd=REPO,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def load_info(output_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(output_dir) / "eval_info.json").read_text())


def assert_same_per_episode(a: dict[Any, tuple[Any, ...]], b: dict[Any, tuple[Any, ...]]) -> None:
    """Two `per_episode` results of one run made in two processes: success, steps and seed bit for
    bit, rewards to 1e-12 (a simulator may differ by an ulp between processes: gym-pusht does)."""
    assert a.keys() == b.keys()
    for key in a:
        (s1, sum1, max1, *rest1), (s2, sum2, max2, *rest2) = a[key], b[key]
        assert (s1, rest1) == (s2, rest2), (key, a[key], b[key])
        for x, y in ((sum1, sum2), (max1, max2)):
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12), (key, a[key], b[key])


def per_episode(output_dir: str | Path) -> dict[tuple[str, int, int], tuple[Any, ...]]:
    """(task_group, task_id, episode_index) -> (success, sum_reward, max_reward, n_steps, seed)."""
    info = load_info(output_dir)
    out = {}
    for task in info["per_task"]:
        m = task["metrics"]
        for i, ep in enumerate(m["episode_ix"]):
            out[(task["task_group"], task["task_id"], ep)] = (
                m["successes"][i], m["sum_rewards"][i], m["max_rewards"][i], m["n_steps"][i], m["seeds"][i],
            )
    return out
