"""The run's lifecycle and the settings it decides once: what eval_info.json says ran is
what ran, a user's MUJOCO_GL wins in every way of running, `--eval.batch_size` keeps
lerobot-eval's meaning, and eval_info.json carries its schema version."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import load_info, per_episode, run_subprocess

FAKE = ("eval", "--env.type=fake", "--eval.n_episodes=7")


def records(path: Path) -> list[tuple[int, str, int]]:
    out = []
    for line in path.read_text().splitlines():
        pid, gl, rows = line.split()
        out.append((int(pid), gl, int(rows)))
    return out


def test_a_users_mujoco_gl_wins_in_every_shard_and_worker(tmp_path: Path) -> None:
    """osmesa is not what `auto` picks here (no libOSMesa: it picks egl), so every process
    seeing osmesa means the user's value was carried, not re-decided."""
    rec = tmp_path / "calls.txt"
    res = run_subprocess(
        *FAKE, "--policy.type=module", "--policy.path=helpers_policies:cheap_recording", "--policy.placement=worker",
        "--eval.num_shards=2", "--executor=shards", "--workers=1", f"--output_dir={tmp_path / 'out'}",
        MUJOCO_GL="osmesa", ROLLBENCH_TEST_RECORD=str(rec),
    )
    assert res.rc == 0, res.err
    seen = records(rec)
    stepping = {pid for pid, _, rows in seen if rows > 0}
    assert len(stepping) == 2  # one worker in each of the two shards ran the episodes
    assert {gl for _, gl, _ in seen} == {"osmesa"}, seen
    assert load_info(tmp_path / "out")["executor"]["mujoco_gl"] == "osmesa"


def test_a_users_mujoco_gl_wins_in_one_process(tmp_path: Path) -> None:
    rec = tmp_path / "calls.txt"
    res = run_subprocess(
        *FAKE, "--policy.type=module", "--policy.path=helpers_policies:recording", "--policy.placement=driver",
        "--workers=2", f"--output_dir={tmp_path / 'out'}", MUJOCO_GL="osmesa", ROLLBENCH_TEST_RECORD=str(rec),
    )
    assert res.rc == 0, res.err
    assert {gl for _, gl, _ in records(rec)} == {"osmesa"}
    assert load_info(tmp_path / "out")["scheduling"]["gl_backend"] == "osmesa"


def test_a_users_mujoco_gl_unset_since_an_earlier_run_is_not_remembered(monkeypatch) -> None:
    """A run under the user's glfw writes MUJOCO_GL=glfw itself; once the user unsets it, the
    next run in this process chooses its own backend, not the earlier run's glfw (which, left
    behind, had one test of tests/test_videos.py refuse the run of the next)."""
    from rollbench import rendering

    monkeypatch.setattr(rendering, "_ours", [None, None])  # this process has written nothing yet
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "glfw")
    rendering.apply_backend(rendering.choose_backend("auto"))  # as a run does
    assert rendering.user_backend() == "glfw"
    monkeypatch.delenv("MUJOCO_GL")
    assert rendering.user_backend() is None
    rendering.apply_backend("egl")  # the next run's own choice
    assert rendering.user_backend() is None
    monkeypatch.setenv("MUJOCO_GL", "osmesa")  # set again: the user's
    assert rendering.user_backend() == "osmesa"


@pytest.mark.metaworld
@pytest.mark.parametrize(("gl", "says"), [("osmesa", "MUJOCO_GL=osmesa: OSMesa's library (libOSMesa.so) is not installed"),
                                          ("nonsense", "MUJOCO_GL='nonsense' is not a rendering backend")])
def test_a_users_mujoco_gl_that_mujoco_cannot_start_with_is_refused_before_the_run(tmp_path: Path, gl: str, says: str,
                                                                                   monkeypatch) -> None:
    """MuJoCo reads MUJOCO_GL once, when it is first imported (listing MetaWorld's tasks), and
    fails there: "'NoneType' object has no attribute 'glGetError'" without libOSMesa, "invalid
    value" for a name it does not know. The run says which value, what is allowed, and which
    backends can work on this machine: those whose library loads, and glfw only with a display
    (none here: DISPLAY unset)."""
    from rollbench.rendering import osmesa_loadable, working_backends

    if gl == "osmesa" and osmesa_loadable():
        pytest.skip("libOSMesa loads on this machine")
    res = run_subprocess("eval", "--env.type=metaworld", "--env.task=reach-v3", "--policy.type=expert",
                         "--eval.n_episodes=1", f"--output_dir={tmp_path / 'out'}", MUJOCO_GL=gl, PYOPENGL_PLATFORM=gl,
                         DISPLAY="", WAYLAND_DISPLAY="")
    assert res.rc == 2, res.err
    (line,) = res.err.strip().splitlines()
    assert line.startswith(f"rollbench: error: {says}"), line
    assert "unset MUJOCO_GL" in line, line
    monkeypatch.delenv("DISPLAY", raising=False)  # as in the run
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    found = [b for b in working_backends() if b != gl]
    if gl == "osmesa":
        advice = line.split("libosmesa6), ", 1)[1]
        assert ("set " + " or ".join(f"MUJOCO_GL={b}" for b in found) + " (found on this machine)" if found
                else "no other backend is found on this machine either") in advice, line
        assert "MUJOCO_GL=glfw" not in line, line
    else:
        assert f"found on this machine: {', '.join(found) or 'none'};" in line, line
    assert "Traceback" not in res.err and "glGetError" not in res.err
    assert not (tmp_path / "out" / "eval_info.json").exists()


@pytest.mark.metaworld
def test_glfw_without_a_display_is_refused_when_the_run_films(tmp_path: Path, monkeypatch) -> None:
    """MUJOCO_GL=glfw with no display: MuJoCo imports, but its first render fails and the worker
    aborts (SIGABRT) in the next, so every filmed episode failed. A run that films is refused
    in one line before it starts; one that films nothing runs as before (it never renders)."""
    from rollbench.benchmarks.metaworld import MetaWorldConfig
    from rollbench.errors import ConfigError
    from rollbench.rendering import check_user_backend

    res = run_subprocess("eval", "--env.type=metaworld", "--env.task=reach-v3", "--policy.type=random",
                         "--eval.n_episodes=1", "--eval.max_episodes_rendered=2", f"--output_dir={tmp_path / 'out'}",
                         MUJOCO_GL="glfw", PYOPENGL_PLATFORM="glfw", DISPLAY="", WAYLAND_DISPLAY="")
    assert res.rc == 2, res.err
    (line,) = res.err.strip().splitlines()
    assert line.startswith("rollbench: error: MUJOCO_GL=glfw needs a display, and none is set"), line
    assert "--eval.max_episodes_rendered=2" in line and "--eval.max_episodes_rendered=0" in line, line
    assert not (tmp_path / "out" / "episodes").exists()
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    check_user_backend(MetaWorldConfig(), films=0)
    with pytest.raises(ConfigError, match="needs a display"):
        check_user_backend(MetaWorldConfig(), films=1)
    monkeypatch.setenv("DISPLAY", ":0")
    check_user_backend(MetaWorldConfig(), films=1)


@pytest.mark.metaworld
def test_glfw_without_a_display_is_refused_when_the_observations_are_images(tmp_path: Path, monkeypatch) -> None:
    """Pixel observations render every step, so a run that films nothing renders too: under
    glfw with no display every episode failed. It is refused in one line before it starts,
    naming the backends that work here (filming nothing would not help, so that is not said)."""
    from rollbench.benchmarks.metaworld import MetaWorldConfig
    from rollbench.errors import ConfigError
    from rollbench.rendering import check_user_backend, working_backends

    res = run_subprocess("eval", "--env.type=metaworld", "--env.task=reach-v3", "--env.obs_type=pixels_agent_pos",
                         "--policy.type=random", "--eval.n_episodes=1", "--eval.max_episodes_rendered=0",
                         f"--output_dir={tmp_path / 'out'}", MUJOCO_GL="glfw", PYOPENGL_PLATFORM="glfw", DISPLAY="",
                         WAYLAND_DISPLAY="")
    assert res.rc == 2, res.err
    (line,) = res.err.strip().splitlines()
    assert line.startswith("rollbench: error: MUJOCO_GL=glfw needs a display, and none is set (DISPLAY"), line
    assert "this run renders its observations (observation.image" in line and "max_episodes_rendered" not in line, line
    monkeypatch.delenv("DISPLAY", raising=False)  # as in the run
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    found = [b for b in working_backends() if b != "glfw"]
    assert ("set " + " or ".join(f"MUJOCO_GL={b}" for b in found) + " (found on this machine)" if found
            else "no other backend is found on this machine either") in line, line
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    check_user_backend(MetaWorldConfig(obs_type="state"), films=0)  # it never renders
    with pytest.raises(ConfigError, match="renders its observations"):
        check_user_backend(MetaWorldConfig(obs_type="pixels_agent_pos"), films=0)
    monkeypatch.setenv("DISPLAY", ":0")
    check_user_backend(MetaWorldConfig(obs_type="pixels_agent_pos"), films=0)


@pytest.mark.parametrize(("workers", "slots", "started"), [(4, 1, 1), (3, 2, 1), (2, 1, 1), (1, 1, 1)])
def test_scheduling_workers_is_the_number_of_workers_started(tmp_path: Path, workers: int, slots: int,
                                                             started: int) -> None:
    """One task of one episode keeps one worker busy: the pool starts one, and says so."""
    res = run_subprocess(
        "eval", "--env.type=fake", "--env.task=near", "--eval.n_episodes=1", "--policy.type=expert",
        f"--workers={workers}", f"--slots_per_worker={slots}", f"--output_dir={tmp_path}",
    )
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    assert info["scheduling"]["workers"] == started
    assert len(list((tmp_path / "logs").glob("worker-*.log"))) == started


def test_scheduling_workers_counts_every_worker_when_the_units_need_them(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--policy.type=expert", "--workers=2", "--slots_per_worker=1", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert load_info(tmp_path)["scheduling"]["workers"] == 2
    assert len(list((tmp_path / "logs").glob("worker-*.log"))) == 2


def test_batch_size_is_envs_per_lockstep_batch(tmp_path: Path) -> None:
    """lerobot-eval's meaning: 7 episodes at --eval.batch_size=3 are batches of 3, 3 and 3
    (the last padded with copies), one call per step with one row per env."""
    rec = tmp_path / "calls.txt"
    res = run_subprocess(
        *FAKE, "--env.task=near", "--policy.type=module", "--policy.path=helpers_policies:recording_lockstep",
        "--eval.batch_size=3", f"--output_dir={tmp_path / 'b3'}", ROLLBENCH_TEST_RECORD=str(rec),
    )
    assert res.rc == 0, res.err
    info = load_info(tmp_path / "b3")
    assert info["mode"] == "lockstep"
    sched = info["scheduling"]
    assert sched["envs_per_batch"] == 3 and sched["isolation"] == "process"
    # the batch's envs spread over the env workers: every row has a slot
    assert sched["workers"] >= 1 and sched["workers"] * sched["slots_per_worker"] >= 3
    rows = Counter(r for _, _, r in records(rec) if r > 0)
    assert set(rows) == {3}
    # the same episodes at another batch size: the results do not depend on it
    rec.unlink()
    res = run_subprocess(
        *FAKE, "--env.task=near", "--policy.type=module", "--policy.path=helpers_policies:recording_lockstep",
        "--eval.batch_size=7", f"--output_dir={tmp_path / 'b7'}", ROLLBENCH_TEST_RECORD=str(rec),
    )
    assert res.rc == 0, res.err
    assert set(Counter(r for _, _, r in records(rec) if r > 0)) == {7}
    assert per_episode(tmp_path / "b3") == per_episode(tmp_path / "b7")


def test_batch_size_in_continuous_mode_says_what_it_means(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--policy.type=expert", "--eval.batch_size=4", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert "--eval.batch_size=4 sets the envs of a lockstep batch" in res.err
    assert "--policy.max_batch_size" in res.err


def test_max_batch_size_smaller_than_a_lockstep_batch_is_refused(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--policy.type=expert", "--eval.mode=lockstep", "--eval.batch_size=4",
                         "--policy.max_batch_size=2", f"--output_dir={tmp_path}")
    assert res.rc == 2
    (line,) = res.err.strip().splitlines()
    assert "--policy.max_batch_size=2" in line and "--eval.batch_size" in line


@pytest.mark.parametrize(("policy", "placement"), [(("--policy.type=expert",), "worker"),
                                                  (("--policy.type=random", "--policy.placement=driver"), "driver")])
def test_eval_info_has_a_schema_version_and_the_command(tmp_path: Path, policy: tuple[str, ...], placement: str) -> None:
    res = run_subprocess(*FAKE, *policy, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    assert info["schema_version"] == 4
    assert info["command"][:2] == ["rollbench", "eval"] and f"--output_dir={tmp_path}" in info["command"]
    for key in ("per_task", "per_group", "overall", "status", "config", "versions", "scheduling"):
        assert key in info
    # every policy call of the run, made in the driver or in the workers (which send theirs back)
    calls = info["policy_calls"]
    assert info["scheduling"]["placement"] == placement and calls["calls"] > 0
    assert calls["rows"] >= info["overall"]["n_episodes"] and calls["rows_per_call"] == round(calls["rows"] / calls["calls"], 3)
    # the same command again runs nothing and calls nothing: the run's calls are still those that ran it
    again = run_subprocess(*FAKE, *policy, f"--output_dir={tmp_path}")
    assert again.rc == 0 and "0 episodes run" in again.out, again.err
    assert load_info(tmp_path)["policy_calls"] == calls


def test_a_worker_that_dies_before_any_episode_stops_the_run_instead_of_looping(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--policy.type=module", "--policy.path=helpers_policies:dies_in_workers",
                         "--policy.placement=worker", "--workers=1", f"--output_dir={tmp_path}", timeout=120)
    assert res.rc == 1, res.err
    assert "times in a row before running any episode" in res.err and "exited with code 3" in res.err
    assert len((tmp_path / "logs" / "worker-0.log").read_text().split("starting at")) - 1 == 4


def test_a_policy_servers_key_is_never_written_and_transport_options_are_not_identity() -> None:
    from rollbench.config.codec import config_from_flags

    def cfg(**opts: str):
        flags = {"env.type": "fake", "policy.type": "remote", "policy.url": "ws://127.0.0.1:9", "output_dir": "x"}
        return config_from_flags({**flags, **{f"policy.{k}": v for k, v in opts.items()}})

    a = cfg(api_key="s3cret", timeout_s="5")
    assert "s3cret" not in str(a.to_dict()) and a.to_dict()["policy"]["options"]["api_key"] == "<redacted>"
    assert "s3cret" not in str(a.identity())
    assert a.identity() == cfg(timeout_s="60", connect_retries="9").identity()  # how to reach it, not which
    other = config_from_flags({"env.type": "fake", "policy.type": "remote", "policy.url": "ws://127.0.0.1:10", "output_dir": "x"})
    assert a.identity() != other.identity()  # another server may be another policy


@pytest.mark.parametrize("flags", [
    ("--eval.mode=continuous", "--workers=2"),
    ("--eval.mode=lockstep", "--eval.batch_size=3"),
    ("--eval.mode=continuous", "--workers=2", "--eval.ci_width=0.5", "--eval.ci_block=2"),
])
def test_a_run_decides_its_schedule_backend_and_stop_rule_once(cli, tmp_path: Path, monkeypatch, flags) -> None:
    """Following one run through the lifecycle: the schedule, the render backend and the
    stop rule are each decided once (the close reuses the opened run's rule)."""
    import rollbench.close as closing
    import rollbench.executors.local as local
    import rollbench.opening as opening
    import rollbench.scheduler.decide as scheduling

    calls: Counter[str] = Counter()

    def spy(module, name: str) -> None:
        real = getattr(module, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    spy(local, "decide")
    spy(scheduling, "choose_backend")
    spy(opening, "stop_rule")
    spy(closing, "stop_rule")  # a merge's: never an eval's
    res = cli(*FAKE, "--policy.type=expert", *flags, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    assert calls == {"decide": 1, "choose_backend": 1, "stop_rule": 1}, calls
    info = load_info(tmp_path)
    assert info["scheduling"]["mode"] == flags[0].split("=")[1]


@pytest.mark.parametrize("placement, omp", [("worker", None), ("driver", None), ("worker", "2")])
def test_threads_are_fields_of_the_schedule_handed_to_the_workers(tmp_path: Path, placement: str, omp: str | None) -> None:
    """Workers run with the schedule's threads (1, or the user's $OMP_NUM_THREADS), set from
    their spec, and a driver that runs the policy beside them takes the cores they leave."""
    env = {"OMP_NUM_THREADS": omp} if omp else {}
    res = run_subprocess(*FAKE, "--policy.type=expert", "--eval.mode=continuous", "--workers=2",
                         f"--policy.placement={placement}", f"--output_dir={tmp_path}", **env)
    assert res.rc == 0, res.err
    sched = load_info(tmp_path)["scheduling"]
    threads = int(omp or 1)
    assert sched["worker_threads"] == threads
    from rollbench.scheduler.common import cpu_count

    assert sched["driver_threads"] == (None if placement == "worker" else max(1, cpu_count() - 2))  # the cores left
    for k in range(2):
        assert f"{threads} OpenMP/torch threads" in (tmp_path / "logs" / f"worker-{k}.log").read_text()
