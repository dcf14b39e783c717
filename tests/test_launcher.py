"""`--executor=shards` (was `--launch=local`, still read as it): N shard processes on this
machine, merged, exactly the single-process result; a failed shard is named with its log and
the command that reruns just it."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, load_info, per_episode, run_subprocess, subprocess_env

FAKE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=4")


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("single")
    res = run_subprocess(*FAKE, f"--output_dir={out}")
    assert res.rc == 0, res.err
    return per_episode(out)


@pytest.mark.parametrize("n", [1, 2])
def test_local_shards_match_one_process(tmp_path: Path, single: dict, n: int) -> None:
    res = run_subprocess(*FAKE, f"--eval.num_shards={n}", "--executor=shards", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert f"12 episodes run in {n} shard processes; complete" in res.out
    assert "overall" in res.out
    assert per_episode(tmp_path) == single
    info = load_info(tmp_path)
    assert [s["shard_id"] for s in info["executor"]["shards"]] == list(range(n))
    assert {s["returncode"] for s in info["executor"]["shards"]} == {0}
    assert all((tmp_path / "logs" / f"shard-{k}.log").stat().st_size > 0 for k in range(n))
    # one combined progress line on stderr, not the children's
    assert "episodes 12/12" in res.err
    # the run is closed once, by the launcher: a child runs and logs its shard, and hands it
    # what it decided and counted (logs/shard-K.json) instead of writing eval_info.json itself
    for k in range(n):
        text = (tmp_path / "logs" / f"shard-{k}.log").read_text()
        assert f"for shard {k} of {n}; the launcher closes the run" in text and "overall" not in text
    shards = info["executor"]["shards"]
    assert [s["shard_id"] for s in shards] == list(range(n)) and all(s["scheduling"]["workers"] >= 1 for s in shards)
    assert info["scheduling"] == shards[0]["scheduling"] and info["mode"] == info["scheduling"]["mode"]  # one schedule
    per_child = [json.loads((tmp_path / "logs" / f"shard-{k}.json").read_text()) for k in range(n)]
    assert sum(c["ran"] for c in per_child) == 12
    assert info["policy_calls"]["calls"] == sum(c["policy_calls"]["calls"] for c in per_child) > 0


def test_local_launch_resumes_and_reruns_nothing_done(tmp_path: Path, single: dict) -> None:
    args = (*FAKE, "--eval.num_shards=2", "--executor=shards", f"--output_dir={tmp_path}")
    assert run_subprocess(*args).rc == 0
    calls = load_info(tmp_path)["policy_calls"]
    res = run_subprocess(*args)
    assert res.rc == 0, res.err
    assert "0 episodes run in 2 shard processes; complete" in res.out
    assert per_episode(tmp_path) == single
    # the run's policy calls are still those of the command that ran its episodes
    assert load_info(tmp_path)["policy_calls"] == calls and calls["calls"] > 0


def test_shards_executor_refuses_a_shard_id(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--eval.num_shards=2", "--eval.shard_id=1", "--executor=shards", f"--output_dir={tmp_path}")
    assert res.rc == 2
    assert res.err.strip().startswith("rollbench: error: --eval.shard_id=1 is not allowed with --executor=shards")
    assert len(res.err.strip().splitlines()) == 1


def test_the_old_launch_local_spelling_is_the_shards_executor(tmp_path: Path, single: dict) -> None:
    """`--launch=local` still runs the shard launcher, with one warning naming the new flag,
    and gives the same episodes; its run resumes as `--executor=shards` (one run, either spelling)."""
    res = run_subprocess(*FAKE, "--eval.num_shards=2", "--launch=local", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    warnings = [line for line in res.err.splitlines() if "--launch=local" in line]
    assert warnings == ["WARNING: --launch=local is now --executor=shards; the old spelling still works"], res.err
    assert "12 episodes run in 2 shard processes; complete" in res.out
    assert per_episode(tmp_path) == single
    info = load_info(tmp_path)
    assert info["executor"]["name"] == "shards" and info["config"]["executor"] == "shards"
    assert "launch" not in info["config"]
    for k in range(2):  # the children run their shard in-process, warned of nothing
        text = (tmp_path / "logs" / f"shard-{k}.log").read_text()
        assert "--executor=local" in text and "--launch" not in text
    res = run_subprocess(*FAKE, "--eval.num_shards=2", "--executor=shards", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "0 episodes run in 2 shard processes; complete" in res.out and "WARNING" not in res.err
    assert per_episode(tmp_path) == single


@pytest.mark.parametrize("mode", ["lockstep", "continuous"])
def test_a_failed_shard_is_named_with_its_rerun_command(tmp_path: Path, single: dict, mode: str) -> None:
    # seed 1001 is episode 1 of every task: shard 1 of 2 fails, shard 0 finishes
    plugin = {"ROLLBENCH_PLUGINS": "failing_bench"}
    args = ("eval", "--env.type=fake_failing", *FAKE[2:], "--eval.num_shards=2", "--executor=shards",
            f"--eval.mode={mode}", f"--output_dir={tmp_path}")
    res = run_subprocess(*args, RB_FAIL_SEED="1001", **plugin)
    assert res.rc == 1
    # both modes (lockstep's envs step in env workers too): the 3 units with seed 1001 are
    # logged as failed after their retries, the shard's other episodes finish
    assert "shard 1 failed (exit code 1; 3 of its episodes missing or failed)" in res.err
    assert "shard 0 failed" not in res.err
    info = load_info(tmp_path)
    assert info["status"] == "partial"
    errors = [f["error"] for t in info["per_task"] for f in t["failed"]]
    assert len(errors) == 3 and all("injected failure at seed 1001" in e for e in errors)
    commands = [line.strip() for line in res.err.splitlines() if line.strip().startswith("rollbench ")]
    assert len(commands) == 2
    rerun, merge = commands
    assert rerun.endswith("--eval.shard_id=1") and "--executor" not in rerun
    assert merge == f"rollbench merge {tmp_path}"
    # the printed commands, run as printed (the cause gone), complete the run
    for command in (rerun, merge):
        res = run_subprocess(*shlex.split(command)[1:], **plugin)
        assert res.rc == 0, res.err
    assert load_info(tmp_path)["status"] == "complete"
    assert per_episode(tmp_path) == single


def test_ctrl_c_stops_every_shard_and_says_how_to_resume(tmp_path: Path, single: dict) -> None:
    args = (*FAKE, "--env.step_sleep_s=0.03", "--eval.batch_size=1", "--eval.mode=lockstep",
            "--eval.num_shards=2", "--executor=shards", f"--output_dir={tmp_path}")
    proc = subprocess.Popen([sys.executable, "-m", "rollbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO)
    try:
        deadline = time.monotonic() + 60  # both children running (one can start seconds after the other)
        while time.monotonic() < deadline and len(list((tmp_path / "episodes").glob("*.jsonl"))) < 2:
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "to resume, run the same command again: rollbench eval" in err
    assert "Traceback" not in err
    logs = "".join((tmp_path / "logs" / f"shard-{k}.log").read_text() for k in range(2))
    assert logs.count("run the same command again to resume") == 2  # both children saved and stopped
    res = run_subprocess(*args)
    assert res.rc == 0, res.err
    assert per_episode(tmp_path) == single


@pytest.mark.slow
@pytest.mark.metaworld
def test_metaworld_two_local_shards_match_one_process(tmp_path: Path) -> None:
    pytest.importorskip("metaworld")
    args = ("eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert", "--eval.n_episodes=2")
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_subprocess(*args, f"--output_dir={one}").rc == 0
    res = run_subprocess(*args, "--eval.num_shards=2", "--executor=shards", f"--output_dir={two}")
    assert res.rc == 0, res.err
    assert per_episode(two) == per_episode(one)
    assert len(per_episode(one)) == 4


def test_workers_auto_probes_once_and_sizes_each_shard(tmp_path: Path, single: dict) -> None:
    res = run_subprocess(*FAKE, "--eval.num_shards=2", "--executor=shards", "--workers=auto", "--tune.budget_s=2",
                         f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "measuring this machine once for all 2 shards" in res.err
    assert per_episode(tmp_path) == single
    for k in range(2):  # each child is handed the one recommendation, and runs with it as is
        handed = json.loads((tmp_path / "logs" / f"shard-{k}.override.json").read_text())
        ran = json.loads((tmp_path / "logs" / f"shard-{k}.json").read_text())["scheduling"]
        assert handed["tuned"]["mode"] == ran["mode"] and 0 < ran["workers"] <= handed["tuned"]["workers"]


def test_overrides_are_decided_once_and_travel_as_json(monkeypatch) -> None:
    """`decide.overrides`: one backend for every child, GPUs dealt from the freest, the cores
    shared unless --workers names a number or a recommendation does; JSON there and back."""
    import dataclasses

    import rollbench.scheduler.decide as decide
    from rollbench.cli import config_from_flags
    from rollbench.rendering import Gpu

    monkeypatch.setattr(decide, "cpu_count", lambda: 8)
    flags = {"env.type": "fake", "policy.type": "expert", "output_dir": "x", "eval.num_shards": "3", "executor": "shards"}
    gpus = [Gpu(0, 100), Gpu(1, 900)]
    got = decide.overrides(config_from_flags(flags), gpus=gpus)
    assert [(o.shard_id, o.gpu, o.workers) for o in got] == [(0, 1, 2), (1, 0, 2), (2, 1, 2)]
    assert len({o.gl_backend for o in got}) == 1
    assert [o.workers for o in decide.overrides(config_from_flags({**flags, "workers": "5"}), gpus=[])] == [None] * 3
    rec = decide.Tuned("continuous", 2, 3, None, 4, False, "cpu")
    (tuned, *_) = decide.overrides(config_from_flags({**flags, "workers": "auto"}), rec, gpus=[])
    assert tuned.workers is None and tuned.tuned == rec and tuned.gpu is None
    again = decide.Override.from_dict(json.loads(json.dumps(dataclasses.asdict(tuned))))
    assert again == tuned
