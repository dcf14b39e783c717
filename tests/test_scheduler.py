"""The continuous scheduler: exact equality with lockstep, and crash isolation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_info, per_episode, run_subprocess

FAKE = ["eval", "--env.type=fake", "--eval.n_episodes=6"]


@pytest.fixture(scope="module")
def lockstep_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = {}
    for policy in ("expert", "random"):
        d = tmp_path_factory.mktemp(f"lockstep-{policy}")
        r = run_subprocess(*FAKE, f"--policy.type={policy}", "--eval.mode=lockstep", "--eval.batch_size=4", f"--output_dir={d}")
        assert r.rc == 0, r.err
        out[policy] = per_episode(d)
    return out


@pytest.mark.parametrize("policy", ["expert", "random"])
@pytest.mark.parametrize(
    ("workers", "slots", "placement"),
    [(1, 1, "worker"), (2, 3, "worker"), (4, 1, "worker"), (1, 3, "driver"), (2, 1, "driver"), (4, 2, "driver")],
)
def test_continuous_equals_lockstep(cli, tmp_path: Path, lockstep_reference, policy, workers, slots, placement) -> None:
    r = cli(
        *FAKE, f"--policy.type={policy}", "--eval.mode=continuous", f"--workers={workers}",
        f"--slots_per_worker={slots}", f"--policy.placement={placement}", f"--output_dir={tmp_path}",
    )
    assert r.rc == 0, r.err
    info = load_info(tmp_path)
    assert info["mode"] == "continuous"
    assert info["scheduling"]["placement"] == placement
    got = per_episode(tmp_path)
    assert len(got) == 18
    assert got == lockstep_reference[policy]


def test_auto_mode_picks_continuous_for_per_slot_policies(cli, tmp_path: Path) -> None:
    r = cli(*FAKE, "--policy.type=random", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert load_info(tmp_path)["mode"] == "continuous"


def test_lockstep_only_policy_runs_lockstep(cli, tmp_path: Path) -> None:
    r = cli(*FAKE, "--policy.type=module", "--policy.path=helpers_sched:shared_state_policy", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert load_info(tmp_path)["mode"] == "lockstep"
    r = cli(*FAKE, "--policy.type=module", "--policy.path=helpers_sched:shared_state_policy",
            "--eval.mode=continuous", f"--output_dir={tmp_path / 'x'}")
    assert r.rc == 2
    assert "--eval.mode=continuous" in r.err and "per-slot" in r.err


@pytest.mark.metaworld
def test_metaworld_continuous_equals_lockstep(tmp_path: Path) -> None:
    base = ["eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert", "--eval.n_episodes=3"]
    a = run_subprocess(*base, "--eval.mode=lockstep", f"--output_dir={tmp_path / 'a'}")
    b = run_subprocess(*base, "--eval.mode=continuous", "--workers=2", f"--output_dir={tmp_path / 'b'}")
    c = run_subprocess(*base, "--eval.mode=continuous", "--workers=2", "--slots_per_worker=2",
                       "--policy.placement=driver", f"--output_dir={tmp_path / 'c'}")
    for r in (a, b, c):
        assert r.rc == 0, r.err
    ref = per_episode(tmp_path / "a")
    assert len(ref) == 6
    assert per_episode(tmp_path / "b") == ref
    assert per_episode(tmp_path / "c") == ref


@pytest.mark.parametrize("placement", ["worker", "driver"])
def test_crash_and_hang_cost_only_their_units(tmp_path: Path, placement: str) -> None:
    """One unit SIGKILLs its worker, one hangs, one raises: the rest is exactly a clean run."""
    n = ["--eval.n_episodes=8", "--env.task=near,mid"]
    clean = run_subprocess("eval", "--env.type=faulty", *n, "--policy.type=expert", "--eval.mode=lockstep",
                           f"--output_dir={tmp_path / 'clean'}", ROLLBENCH_PLUGINS="faulty_bench")
    assert clean.rc == 0, clean.err
    faulty = run_subprocess(
        "eval", "--env.type=faulty", *n, "--policy.type=expert", "--env.crash_seed=1002", "--env.hang_seed=1005",
        "--env.error_seed=1006", "--eval.max_retries=1", "--eval.step_timeout_s=2", "--workers=2",
        f"--policy.placement={placement}", f"--output_dir={tmp_path / 'faulty'}", ROLLBENCH_PLUGINS="faulty_bench",
        timeout=240,
    )
    assert faulty.rc == 1, faulty.err  # the run completes, but says some episodes failed
    assert "failed" in faulty.out
    ref = per_episode(tmp_path / "clean")
    got = per_episode(tmp_path / "faulty")
    bad = {k for k in ref if k[2] in (2, 5, 6)}
    assert len(bad) == 6  # episodes 2, 5, 6 of both tasks
    assert set(got) == set(ref) - bad
    assert {k: ref[k] for k in got} == got
    info = load_info(tmp_path / "faulty")
    assert info["overall"]["n_failed"] == 6
    assert info["overall"]["n_episodes"] == 10
    assert info["status"] == "partial"
    causes = {(t["task"], f["episode_index"]): f["error"] for t in info["per_task"] for f in t["failed"]}
    assert len(causes) == 6
    for task in ("near", "mid"):
        assert "SIGKILL" in causes[(task, 2)] and "goodbye from stderr" in causes[(task, 2)]
        assert "step_timeout_s" in causes[(task, 5)] and "hang" in causes[(task, 5)]
        assert "RuntimeError: faulty env: injected error" in causes[(task, 6)]
        assert "Traceback" in causes[(task, 6)]
    # each bad unit ran 1 + max_retries times and was logged once, as failed
    lines = [json.loads(line) for f in (tmp_path / "faulty" / "episodes").glob("*.jsonl") for line in f.read_text().splitlines()]
    failed = [rec for rec in lines if rec["status"] == "failed"]
    assert len(failed) == 6 and all(rec["attempt"] == 1 for rec in failed)
    keys = [(rec["task_group"], rec["task_id"], rec["episode_index"]) for rec in lines]
    assert len(keys) == len(set(keys)) == 16


def test_policy_error_in_worker_stops_the_run(tmp_path: Path) -> None:
    r = run_subprocess("eval", "--env.type=fake", "--eval.n_episodes=2", "--policy.type=module",
                       "--policy.path=helpers_sched:cheap_nan_policy", "--eval.mode=continuous",
                       f"--output_dir={tmp_path}")
    assert r.rc == 1
    last = r.err.strip().splitlines()[-1]
    assert last.startswith("rollbench: error:") and "NaN" in last and "Traceback" not in r.err


@pytest.mark.parametrize("policy", ["random", "module"])
def test_lockstep_parallel_tasks_equal_sequential(cli, tmp_path: Path, lockstep_reference, policy: str) -> None:
    """Several tasks at once, one shallow policy copy per task: same episodes as one at a time."""
    flags = [f"--policy.type={policy}"]
    if policy == "module":
        flags.append("--policy.path=helpers_sched:per_task_counter_policy")
    seq = cli(*FAKE, *flags, "--eval.mode=lockstep", "--eval.batch_size=4", f"--output_dir={tmp_path / 'seq'}")
    par = cli(*FAKE, *flags, "--eval.mode=lockstep", "--eval.batch_size=4", "--eval.max_parallel_tasks=3",
              "--workers=3", f"--output_dir={tmp_path / 'par'}")  # three task runners, each with its own env workers
    here = cli(*FAKE, *flags, "--eval.mode=lockstep", "--eval.batch_size=4", "--eval.max_parallel_tasks=3",
               "--eval.isolation=none", "--eval.use_async_envs=true", f"--output_dir={tmp_path / 'here'}")
    assert seq.rc == 0 and par.rc == 0 and here.rc == 0, seq.err + par.err + here.err
    assert per_episode(tmp_path / "par") == per_episode(tmp_path / "seq") == per_episode(tmp_path / "here")
    logs = sorted(p.name for p in (tmp_path / "par" / "logs").glob("worker-*.log"))
    assert logs == ["worker-0.log", "worker-t1-0.log", "worker-t2-0.log"], logs  # 3 workers // 3 runners: 1 each
    if policy == "random":
        assert per_episode(tmp_path / "par") == lockstep_reference["random"]


@pytest.mark.parametrize(
    "env",
    [
        pytest.param(["--env.type=metaworld", "--env.task=reach-v3", "--env.obs_type=pixels_agent_pos",
                      "--env.observation_width=48", "--env.observation_height=48", "--env.episode_length=12"],
                     marks=pytest.mark.metaworld, id="metaworld-pixels"),
        pytest.param(["--env.type=pusht", "--env.episode_length=15"], marks=pytest.mark.pusht, id="pusht-pixels"),
    ],
)
def test_pixel_observations_through_shared_memory(cli, tmp_path: Path, env: list[str]) -> None:
    """Images travel through the workers' shared memory; results equal lockstep's."""
    base = ["eval", *env, "--policy.type=module", "--policy.path=helpers_sched:image_mean_policy", "--eval.n_episodes=3"]
    a = cli(*base, "--eval.mode=lockstep", f"--output_dir={tmp_path / 'a'}")
    b = cli(*base, "--eval.mode=continuous", "--policy.placement=driver", "--workers=2", f"--output_dir={tmp_path / 'b'}")
    assert a.rc == 0 and b.rc == 0, a.err + b.err
    assert per_episode(tmp_path / "a") == per_episode(tmp_path / "b")
    assert len(per_episode(tmp_path / "a")) == 3


@pytest.mark.metaworld
def test_pixels_stay_right_after_a_worker_closes_another_tasks_env(cli, tmp_path: Path) -> None:
    """One slot runs reach, then push; closing reach's env (its task is done) while push's
    lives released push's GL context, and push's frames came back black. Actions computed
    from the image make the episodes differ from lockstep's when that happens."""
    base = ["eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--env.obs_type=pixels_agent_pos",
            "--env.observation_width=32", "--env.observation_height=32", "--env.episode_length=6",
            "--policy.type=module", "--policy.path=helpers_sched:image_mean_policy", "--eval.n_episodes=2"]
    a = cli(*base, "--eval.mode=lockstep", f"--output_dir={tmp_path / 'a'}")
    b = cli(*base, "--eval.mode=continuous", "--policy.placement=driver", "--workers=1", "--slots_per_worker=1",
            f"--output_dir={tmp_path / 'b'}")
    assert a.rc == 0 and b.rc == 0, a.err + b.err
    assert per_episode(tmp_path / "a") == per_episode(tmp_path / "b")


def test_max_batch_size_bounds_rows_per_call_in_driver_placement(cli, tmp_path: Path) -> None:
    base = [*FAKE, "--policy.type=module", "--policy.path=helpers_policies:at_most_two_rows", "--eval.mode=continuous",
            "--policy.placement=driver", "--workers=2", "--slots_per_worker=4"]
    unbounded = cli(*base, f"--output_dir={tmp_path / 'a'}")
    assert unbounded.rc == 1 and "called with 4 rows" in unbounded.err  # 2 workers x 4 slots in 2 groups
    bounded = cli(*base, "--policy.max_batch_size=2", f"--output_dir={tmp_path / 'b'}")
    assert bounded.rc == 0, bounded.err
    assert len(per_episode(tmp_path / "b")) == 18
