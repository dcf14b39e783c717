"""`--executor=ray`: the same per-episode results as the local executor, on a real local
Ray cluster; a dead actor's episodes requeued (the one that kills it found and failed), an
actor that cannot start reported once, a killed driver resumed by rerunning the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conftest import REPO, TESTS, load_info, per_episode, run_subprocess, subprocess_env  # noqa: E402
from rollbench.results.log import read_records  # noqa: E402

pytestmark = pytest.mark.ray

FAKE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=5")


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module's in-process runs (the executor joins it)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Ray 2.60 turns token auth on for local clusters
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO / "src")])}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local")
    res = run_subprocess(*FAKE, f"--output_dir={out}")
    assert res.rc == 0, res.err
    return out


@pytest.fixture(scope="module")
def local_fake(local_dir: Path) -> dict:
    return per_episode(local_dir)


def test_ray_equals_local_on_the_fake_benchmark(cli, cluster, tmp_path: Path, local_fake: dict, local_dir: Path) -> None:
    res = cli(*FAKE, "--executor=ray", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "15 episodes run on 2 ray actors; complete" in res.out
    assert per_episode(tmp_path) == local_fake
    info = load_info(tmp_path)
    assert info["mode"] == "continuous" and info["executor"]["name"] == "ray" and info["executor"]["actors"] == 2
    # decided by the one `decide`: a local run's schedule fields, the actors as its workers
    local = load_info(local_dir)["scheduling"]
    assert set(local) == set(info["scheduling"]) and info["scheduling"]["workers"] == 2
    assert info["scheduling"]["placement"] == "worker" and info["scheduling"]["queue_per_slot"] == 1
    # the same top-level keys as one process writes (tests/test_sharding.py: shards and merges)
    assert list(info) == list(load_info(local_dir)), (list(info), list(load_info(local_dir)))
    assert info["policy_calls"]["rows"] >= info["policy_calls"]["calls"] > 0 and info["command"][:2] == ["rollbench", "eval"]
    assert info["executor"]["counts"] == {"actors_started": 2, "actor_deaths": 0, "requeued_units": 0, "videos_uploaded": 0}
    # only the driver writes the log: one writer, every unit once
    recs = read_records(tmp_path)
    assert len(recs) == 15 and len({r.writer for r in recs}) == 1


@pytest.mark.parametrize("extra", [("--ray.actors=1", "--ray.slots_per_actor=3"), ("--ray.queue_per_slot=0",),
                                   ("--ray.slots_per_actor=2", "--ray.queue_per_slot=3")])
def test_ray_results_do_not_depend_on_actors_slots_or_batches(cli, cluster, tmp_path: Path, local_fake: dict,
                                                             extra: tuple[str, ...]) -> None:
    res = cli(*FAKE, "--executor=ray", *extra, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path) == local_fake


def test_the_policy_in_the_driver_with_env_only_actors_equals_local(cli, cluster, tmp_path: Path, local_fake: dict) -> None:
    """--policy.placement=driver: one policy in this process (a GPU box's), the actors only
    step envs and send their observations back pickled with each step's reply."""
    res = cli(*FAKE, "--executor=ray", "--policy.placement=driver", "--ray.slots_per_actor=2", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path) == local_fake
    info = load_info(tmp_path)
    assert info["scheduling"]["placement"] == "driver" and info["scheduling"]["workers"] == 2
    assert info["policy_calls"]["rows"] > info["policy_calls"]["calls"]  # the driver's calls batch the actors' slots


@pytest.mark.metaworld
def test_ray_equals_local_on_metaworld(cli, cluster, tmp_path: Path) -> None:
    base = ("eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert", "--eval.n_episodes=3")
    assert cli(*base, f"--output_dir={tmp_path / 'local'}").rc == 0
    res = cli(*base, "--executor=ray", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err
    a, b = per_episode(tmp_path / "local"), per_episode(tmp_path / "ray")
    assert a == b and len(a) == 6
    assert len({v[1] for v in a.values()}) == 6  # seeded goals: every episode its own


def _episode_2_goes_wrong(cli, tmp_path: Path, fault: str, deaths: int, *extra: str) -> tuple[dict, str]:
    """Episode 2 of 6 (seed 1002) has `fault`: run locally and on Ray (1 retry), 3 slots per
    actor; on Ray it alone fails, after `deaths` actor deaths, and every other episode equals
    the local run's. (eval_info, its cause)"""
    base = ("eval", "--env.type=faulty", "--env.task=near", f"--env.{fault}_seed=1002", "--policy.type=expert",
            "--eval.n_episodes=6", *extra)
    os.environ["ROLLBENCH_PLUGINS"] = "faulty_bench"
    try:
        cli(*base, "--eval.max_retries=0", f"--output_dir={tmp_path / 'local'}")  # the local results of the others
        res = cli(*base, "--executor=ray", "--ray.slots_per_actor=3", "--eval.max_retries=1",
                  f"--output_dir={tmp_path / 'ray'}")
    finally:
        del os.environ["ROLLBENCH_PLUGINS"]
    assert res.rc == 1, res.err
    info = load_info(tmp_path / "ray")
    (task,) = info["per_task"]
    assert [f["episode_index"] for f in task["failed"]] == [2]
    assert task["metrics"]["episode_ix"] == [0, 1, 3, 4, 5]
    local = per_episode(tmp_path / "local")
    assert {k: v for k, v in local.items() if k[2] != 2} == per_episode(tmp_path / "ray")
    assert info["executor"]["counts"]["actor_deaths"] == deaths
    return info, task["failed"][0]["error"]


def test_an_actor_killed_by_an_episode_costs_only_that_episode(cli, cluster, tmp_path: Path) -> None:
    """Seed 1002 SIGKILLs the process that steps it (the actor), whose mark of the slot it
    was in dies with it: the episodes at the head of its 3 slots run again, each alone, and
    the two innocent ones finish; seed 1002 kills every actor it runs in and ends failed
    after its retry (3 deaths: the shared one, then alone twice)."""
    info, cause = _episode_2_goes_wrong(cli, tmp_path, "crash", 3)
    assert "ray actor" in cause and "died" in cause
    assert info["executor"]["counts"]["requeued_units"] >= 2  # its slot-mates of the first death ran again, alone


def test_an_actor_whose_env_hangs_is_killed_and_costs_only_that_episode(cli, cluster, tmp_path: Path) -> None:
    """Seed 1002 hangs in its first step: the actor's pulls keep answering with a stale
    heartbeat and the slot it is stuck in, so the driver kills it after --eval.step_timeout_s
    and charges that episode alone (2 deaths: it and its retry); the others finish."""
    _, cause = _episode_2_goes_wrong(cli, tmp_path, "hang", 2, "--eval.step_timeout_s=2")
    assert "step_timeout_s" in cause and "hang" in cause


@pytest.mark.parametrize("placement", ["auto", "driver"])
def test_videos_sent_back_to_the_driver_are_where_the_report_expects_them(cli, cluster, tmp_path: Path,
                                                                         placement: str) -> None:
    """--ray.upload_videos=true (auto does it for actors on another host): each video comes
    back with the report of its episode's end and the driver writes it under --output_dir,
    whether the policy runs in the actors or in the driver."""
    import av

    res = cli(*FAKE, "--executor=ray", "--eval.max_episodes_rendered=2", "--ray.upload_videos=true",
              f"--policy.placement={placement}", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    videos = info["overall"]["video_paths"]
    assert len(videos) == 6  # 2 per task
    assert info["executor"]["counts"]["videos_uploaded"] == 6
    for v in videos:
        with av.open(str(tmp_path / v)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 1
    assert not list(tmp_path.glob("videos/**/.*.tmp.mp4"))


@pytest.mark.pusht
@pytest.mark.lerobot
def test_lerobots_env_through_the_bridge_in_ray_actors(cli, cluster, tmp_path: Path) -> None:
    """The `lerobot` bridge on Ray: LeRobot's PushT built in the actors from its config (passed
    through --env.fields), the episodes of a local run, and its `render()` filmed and sent back."""
    pytest.importorskip("gym_pusht")
    import av

    flags = ("eval", "--env.type=lerobot", "--env.name=pusht", "--env.fields=obs_type=environment_state_agent_pos",
             "--env.episode_length=20", "--policy.type=random", "--eval.n_episodes=3", "--seed=1000",
             "--eval.max_episodes_rendered=1", "--eval.report=false")
    local = run_subprocess(*flags, f"--output_dir={tmp_path / 'local'}")
    assert local.rc == 0, local.err
    res = cli(*flags, "--executor=ray", "--ray.upload_videos=true", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err
    assert load_info(tmp_path / "ray")["executor"]["name"] == "ray"
    assert per_episode(tmp_path / "ray") == per_episode(tmp_path / "local")
    (video,) = load_info(tmp_path / "ray")["overall"]["video_paths"]
    with av.open(str(tmp_path / "ray" / video)) as container:
        assert sum(1 for _ in container.decode(video=0)) > 1


def test_an_actor_that_cannot_start_is_reported_once(cli, cluster, tmp_path: Path) -> None:
    res = cli("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_policies:fails_in_ray_actors",
              "--policy.placement=worker", "--eval.n_episodes=2", "--executor=ray", f"--output_dir={tmp_path}")
    assert res.rc == 1
    (line,) = [ln for ln in res.err.splitlines() if ln.startswith("rollbench:")]
    assert "failed to start" in line and "simulator_x" in line


@pytest.mark.parametrize(
    "flags, needle",
    [(("--ray.actors=0",), "--ray.actors=0"), (("--ray.cpus_per_actor=0",), "--ray.cpus_per_actor=0"),
     (("--eval.num_shards=2", "--launch=local"), "--executor=ray with --launch=local"),
     (("--workers=auto",), "--workers=auto is for the local executor"),
     (("--ray.units_per_call=2",), "use --ray.queue_per_slot")],
)
def test_bad_ray_flags_are_one_line_errors(cli, tmp_path: Path, flags: tuple[str, ...], needle: str) -> None:
    res = cli(*FAKE, "--executor=ray", *flags, f"--output_dir={tmp_path}")
    assert res.rc == 2
    assert needle in res.err and len(res.err.strip().splitlines()) == 1, res.err


def test_a_lockstep_only_policy_is_refused_before_ray_starts(cli, tmp_path: Path) -> None:
    res = cli("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_sched:shared_state_policy",
              "--executor=ray", f"--output_dir={tmp_path}")
    assert res.rc == 2 and "keeps no per-slot state" in res.err and "use --executor=local" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1 and not (tmp_path / "run.json").exists()


def test_a_killed_driver_resumes_on_rerun(tmp_path: Path, local_fake: dict) -> None:
    """SIGKILL of the whole process group (driver, its local Ray, the actors) mid-run, then
    the same command again: every episode once, equal to the local run."""
    args = [*FAKE, "--env.step_sleep_s=0.03", "--executor=ray", f"--output_dir={tmp_path}",
            "--eval.max_episodes_rendered=0"]
    proc = subprocess.Popen([sys.executable, "-m", "rollbench", *args], cwd=REPO, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_records(tmp_path)) < 3:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(read_records(tmp_path))
    assert 3 <= done_before < 15, done_before
    res = run_subprocess(*args, timeout=300)
    assert res.rc == 0, res.err
    assert f"{15 - done_before} episodes run on" in res.out
    recs = read_records(tmp_path)
    assert len(recs) == 15 and len({r.key for r in recs}) == 15  # nothing twice
    assert per_episode(tmp_path) == local_fake


def _actor_pids() -> list[int]:
    """Processes whose title Ray set to one of our actors (`ray::RolloutActor...`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if b"ray::RolloutActor" in fh.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_an_actor_killed_mid_run_is_replaced_and_the_results_do_not_change(cli, cluster, tmp_path: Path,
                                                                           local_fake: dict) -> None:
    import threading

    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = _actor_pids()
            if pids and len(read_records(tmp_path)) >= 2:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.05)

    t = threading.Thread(target=kill_one)
    t.start()
    res = cli(*FAKE, "--env.step_sleep_s=0.02", "--executor=ray", "--ray.slots_per_actor=2", f"--output_dir={tmp_path}")
    t.join()
    assert killed, "no actor was found to kill"
    assert res.rc == 0, res.err
    assert per_episode(tmp_path) == local_fake
    counts = load_info(tmp_path)["executor"]["counts"]
    assert counts["actor_deaths"] == 1 and counts["actors_started"] == 3 and counts["requeued_units"] >= 1


@pytest.mark.metaworld
def test_ray_equals_local_on_metaworld_pixels(cli, cluster, tmp_path: Path) -> None:
    base = ("eval", "--env.type=metaworld", "--env.task=reach-v3", "--env.obs_type=pixels_agent_pos",
            "--env.observation_width=32", "--env.observation_height=32", "--env.episode_length=15",
            "--policy.type=random", "--eval.n_episodes=2")
    assert cli(*base, f"--output_dir={tmp_path / 'local'}").rc == 0
    res = cli(*base, "--executor=ray", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "local") == per_episode(tmp_path / "ray")
    # the camera frames travel back to a policy in the driver, pickled with each step's reply
    res = cli(*base, "--executor=ray", "--policy.placement=driver", f"--output_dir={tmp_path / 'driver'}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "local") == per_episode(tmp_path / "driver")


def test_default_actors_fit_node_by_node() -> None:
    from rollbench.scheduler.decide import fitting_actors

    nodes = [{"CPU": 1.5, "GPU": 0.0}, {"CPU": 1.5, "GPU": 0.0}]
    assert fitting_actors(nodes, 1.0, 0.0) == 2  # not 3: an actor never spans two nodes
    gpu_nodes = [{"CPU": 32.0, "GPU": 4.0}, {"CPU": 32.0, "GPU": 1.0}]
    assert fitting_actors(gpu_nodes, 4.0, 0.5) == 8 + 2  # the GPUs bound them: 8 and 2
    assert fitting_actors(gpu_nodes, 4.0, 0.0) == 16
    assert fitting_actors([{"CPU": 0.5, "GPU": 0.0}], 1.0, 0.0) == 0


def test_an_unreachable_cluster_is_one_line_within_the_timeout(tmp_path: Path) -> None:
    """ray.init retries an address nobody answers at for ever, printing GCS warnings: rollbench
    asks first, for --ray.connect_timeout_s, then stops in one line before writing anything. (A
    process of its own: this module's other tests leave Ray initialised in this one.)"""
    t0 = time.monotonic()
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--executor=ray", "--ray.address=127.0.0.1:1",
              "--ray.connect_timeout_s=1.5", f"--output_dir={tmp_path / 'out'}")
    took = time.monotonic() - t0
    assert res.rc == 2, res.err
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert len(errors) == 1 and "no Ray cluster answers at 127.0.0.1:1 within 1.5 s" in errors[0], res.err
    assert 1.5 <= took < 60, took
    assert not (tmp_path / "out").exists()


def test_an_adaptive_ray_run_is_the_fixed_runs_prefix(cli, cluster, tmp_path: Path) -> None:
    from rollbench.stopping.adaptive import decide
    from test_adaptive import ADAPTIVE, BASE, RULE, check_adaptive

    res = run_subprocess(*BASE, "--eval.report=false", f"--output_dir={tmp_path / 'fixed'}")
    assert res.rc == 0, res.err
    episodes = per_episode(tmp_path / "fixed")
    stops = {}
    for key in {(k[0], k[1]) for k in episodes}:
        stops[key] = decide(RULE, {k[2]: v[0] for k, v in episodes.items() if (k[0], k[1]) == key}).n_episodes
    res = cli(*ADAPTIVE, "--executor=ray", "--eval.report=false", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err
    prefix = {k: v for k, v in episodes.items() if k[2] < stops[(k[0], k[1])]}
    check_adaptive(tmp_path / "ray", {"episodes": episodes, "stops": stops, "prefix": prefix})


@pytest.mark.lerobot
def test_a_recorded_ray_run_gives_the_local_runs_dataset(cli, cluster, tmp_path: Path) -> None:
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    from test_recording import FAKE, assert_same_dataset

    res = run_subprocess(*FAKE, f"--output_dir={tmp_path / 'local'}")
    assert res.rc == 0, res.err
    res = cli(*FAKE, "--executor=ray", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err
    assert_same_dataset(tmp_path / "local", tmp_path / "ray")


def test_a_ray_run_against_a_slower_run_waits_for_the_decision(cli, cluster, tmp_path: Path) -> None:
    """--eval.versus's pacing in Ray's own loop: the units more than a block ahead of the
    other run are not sent until it catches up (tests/test_compare_sequential.py: locally)."""
    from test_compare_sequential import check_paced, race

    fixed60 = _fixed60(tmp_path / "fixed")
    a, b = race(tmp_path, cli, "--executor=ray", "--ray.actors=2", sleep="0.005")
    check_paced(tmp_path, a, b, fixed60, in_flight=2 * 2)  # 2 actors x 1 slot, one episode queued behind each


def _fixed60(root: Path) -> tuple[Path, Path, dict[int, int]]:
    from test_compare_sequential import VERSUS, _decided_stops

    for name, noise in (("a", "0"), ("b", "3.0")):
        res = run_subprocess(*VERSUS, f"--policy.action_noise={noise}", f"--output_dir={root / name}")
        assert res.rc == 0, res.err
    return root / "a", root / "b", _decided_stops(root / "a", root / "b")


def test_a_sweep_on_ray_is_the_local_sweep(cli, cluster, tmp_path: Path) -> None:
    """--eval.perturb through Ray actors: every condition's episodes (a paraphrase included: the
    actors get the run's table) equal one local process's, and so does per_condition."""
    paraphrases = '{"near": ["go near"], "mid": ["go to the middle"], "far": ["go far"]}'
    sweep = (*FAKE, "--eval.perturb=action.noise=0.3;action.latency=2;state.noise=0.4;language.paraphrase=1",
             f"--eval.paraphrases={paraphrases}", "--policy.placement=worker")
    local = run_subprocess(*sweep, f"--output_dir={tmp_path / 'local'}")
    assert local.rc == 0, local.err
    res = cli(*sweep, "--executor=ray", f"--output_dir={tmp_path / 'ray'}")
    assert res.rc == 0, res.err

    def episodes(out: Path) -> dict:
        return {(r.condition, r.task, r.seed): r.outcome() for r in read_records(out)}

    assert len(episodes(tmp_path / "ray")) == 75 and episodes(tmp_path / "ray") == episodes(tmp_path / "local")
    strip = lambda info: [{k: v for k, v in c.items() if k != "per_task"} for c in info["per_condition"]]  # noqa: E731
    assert strip(load_info(tmp_path / "ray")) == strip(load_info(tmp_path / "local"))
