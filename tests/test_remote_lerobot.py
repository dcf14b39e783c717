"""A LeRobot ACT checkpoint on PushT pixels served by `rollbench serve`: the same episodes as in-process.

torch's CPU kernels are bitwise invariant neither to the rows per call nor to the thread count
(docs/architecture.md), so both sides run one row per call with one thread: in-process in
lockstep at batch 1, remotely with `--serve.max_batch_size=1` (each server slot keeps its own
ACT chunk queue, which equals lockstep at batch 1: tests/test_lerobot.py).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")
pytest.importorskip("websockets")

from conftest import run_subprocess
from helpers_remote import free_port, serve_process
from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig
from test_lerobot import EPISODES, LENGTH, SEED, assert_same_episodes, ours, rollbench_args

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht, pytest.mark.slow]


def test_act_on_pusht_pixels_is_identical_through_both_dialects(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path / "act", PushTConfig())
    ref = run_subprocess(*rollbench_args(ckpt, tmp_path / "ref", "--eval.mode=lockstep", "--eval.batch_size=1"), OMP_NUM_THREADS="1")
    assert ref.rc == 0, ref.err[-3000:]
    assert any(r[1] > 0 for r in ours(tmp_path / "ref")), "the episodes should earn some reward, or the comparison is empty"
    port = free_port()
    server = serve_process(port, "--policy.type=lerobot", f"--policy.path={ckpt}", "--env.type=pusht",
                           f"--env.episode_length={LENGTH}", "--serve.max_batch_size=1", OMP_NUM_THREADS="1")
    try:
        for protocol in ("openpi", "vla-eval"):
            res = run_subprocess(
                "eval", "--env.type=pusht", f"--env.episode_length={LENGTH}", "--policy.type=remote",
                f"--policy.url=ws://127.0.0.1:{port}", f"--policy.protocol={protocol}", "--policy.replan_steps=1",
                f"--eval.n_episodes={EPISODES}", f"--seed={SEED}", "--workers=2", f"--output_dir={tmp_path / protocol}",
            )
            assert res.rc == 0, res.err[-3000:]
            assert_same_episodes(ours(tmp_path / protocol), ours(tmp_path / "ref"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
