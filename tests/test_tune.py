"""`rollbench tune`: the decision logic on recorded probes, and a real short probe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import load_info, per_episode
from rollbench import tune
from rollbench.benchmarks.fake import FakeConfig
from rollbench.config.codec import config_from_flags
from rollbench.plan import plan_for
from rollbench.tune import budget, cache
from rollbench.tune.env_probe import MAX_WINDOW_S, TARGET_WINDOWS, _regimes, _Samples, plan_windows
from rollbench.tune.figures import (
    EnvProbe,
    GpuInfo,
    InferencePoint,
    MachineProbe,
    PolicyProbe,
    Probe,
    RunShape,
    estimated,
    measured,
)
from rollbench.tune.model import LAUNCH_S, candidates, continuous_driver, continuous_worker, recommend
from rollbench.tune.stats import trimmed_mean

GiB = 2**30


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stored probes go to the test's directory, never to the real home cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "rollbench" / "probes"


def recorded(
    cores: int = 16, mem_gib: float = 64.0, gpus: int = 0, step_ms: float = 0.5, step_all_ms: float | None = None,
    placement: str = "worker", per_slot_state: bool = True, device: str = "cpu",
    inference: tuple[tuple[int, float], ...] = (), steps_per_inference: int = 1, worker_rss_mib: float = 300.0,
    n_tasks: int = 10, n_episodes: int = 50, episode_steps: float = 100.0, constant: bool = False,
    peak_bytes_per_row: int | None = None, amp_speedup: float | None = None, policy_ms_worker: float = 0.03,
    **run: Any,
) -> Probe:
    """A probe as `rollbench tune` records it, for a machine we may not have."""
    m = measured
    gpu_list = tuple(GpuInfo(i, "H200", 143_000, 140_000) for i in range(gpus))
    points = tuple(
        InferencePoint(b, ms, 0.05, 1.0, None if peak_bytes_per_row is None else peak_bytes_per_row * b) for b, ms in inference
    )
    amp = tuple(dataclasses.replace(p, full_ms=p.full_ms / amp_speedup) for p in points) if amp_speedup else ()
    return Probe(
        machine=MachineProbe(m(cores), m(mem_gib * GiB), gpu_list),
        env=EnvProbe(
            backend="egl", worker_start_s=m(0.3), first_build_s=m(0.8), build_s=m(0.1), reset_ms=m(5.0),
            step_ms_1=m(step_ms), step_ms_all=m(step_all_ms if step_all_ms is not None else step_ms * 1.1),
            render_ms=m(0.0), policy_ms_worker=m(policy_ms_worker if placement == "worker" else 0.0),
            episode_steps=m(episode_steps) if not constant else estimated(episode_steps, "step limit"),
            episode_steps_constant=constant, worker_rss_bytes=m(worker_rss_mib * 2**20), roundtrip_ms=m(0.05),
            max_steps=int(episode_steps * 2) if not constant else int(episode_steps),
        ),
        policy=PolicyProbe(
            type="x", device=device, placement=placement, per_slot_state=per_slot_state, load_s=m(1.0),
            param_bytes=m(100 * 2**20), rss_bytes=m(500 * 2**20), steps_per_inference=m(steps_per_inference),
            inference=points, amp_inference=amp,
        ),
        run=RunShape(n_units=n_tasks * n_episodes, n_tasks=n_tasks, n_episodes=n_episodes, videos_per_task=0,
                     device=device, **run),
    )


def test_simulation_bound_cpu_box_uses_every_core_and_no_more():
    rec = recommend(recorded(cores=16, step_ms=0.5))
    assert (rec.mode, rec.placement, rec.workers, rec.slots_per_worker) == ("continuous", "worker", 16, 1)
    assert rec.bottleneck.startswith("simulation-bound: 16 cores")
    # 16 cores x 1 / (0.55 ms step with all cores busy + 0.05 ms amortised reset + 0.03 ms
    # policy + 0.03 ms bookkeeping): the steady rate follows the measured step, not a guess
    assert rec.steady_steps_per_s == pytest.approx(16 * 1000 / 0.66, rel=1e-6)
    assert rec.predicted_wall_s > rec.predicted_total_steps / rec.steady_steps_per_s


def test_oversubscribing_cores_is_never_recommended():
    probe = recorded(cores=4, step_ms=1.0)
    walls = {c.workers: c.wall_s for c in candidates(probe)}
    assert walls[8] > walls[4]  # time-sliced cores: more start-up, no more steps/s
    assert recommend(probe).workers == 4


def test_inference_bound_gpu_policy_gets_big_batches():
    # a GPU network: 20 ms per call whatever the batch up to 64, then linear
    probe = recorded(cores=16, gpus=1, device="cuda", placement="driver", step_ms=1.0,
                     inference=((1, 20.0), (8, 20.0), (64, 21.0), (128, 40.0)))
    rec = recommend(probe)
    assert rec.placement == "driver"
    assert rec.workers * rec.slots_per_worker >= 64  # fills the GPU's flat part
    assert rec.bottleneck.startswith("inference-bound")
    assert "inference at batch" in rec.bottleneck
    small = continuous_driver(probe, 16, 1)
    assert rec.steady_steps_per_s > 2 * small.steps_per_s


def test_chunking_is_amortised_over_its_steps():
    flat = recorded(placement="driver", inference=((1, 10.0), (16, 40.0)), steps_per_inference=1)
    chunk = recorded(placement="driver", inference=((1, 10.0), (16, 40.0)), steps_per_inference=10)
    assert continuous_driver(chunk, 8, 2).steps_per_s > 2.5 * continuous_driver(flat, 8, 2).steps_per_s


def test_chunks_in_phase_are_a_burst_not_an_average():
    """Equal-length episodes keep every slot's queue in phase: the network runs on all rows at
    once every 10 steps, and nothing else overlaps that call. A per-call average would spread
    it over the queued steps and see no reason for more rows; the burst makes big batches pay.
    (PushT pixels + LeRobot ACT here: 2 workers x 8 slots ran 1.2x faster than x 2.)"""
    kw: dict[str, Any] = {"cores": 2, "placement": "driver", "step_ms": 1.35, "step_all_ms": 1.4,
                          "inference": ((1, 18.0), (2, 15.0), (4, 21.0), (8, 42.0)), "steps_per_inference": 10,
                          "n_tasks": 1, "n_episodes": 16, "episode_steps": 300.0}
    in_phase, spread = recorded(constant=True, **kw), recorded(constant=False, **kw)
    # in phase: a cycle in 10 pays the whole call for both groups, 2 x 18 ms at one row each
    one_row = continuous_driver(in_phase, 2, 1)
    assert one_row.steps_per_s < 2 * 10 * 1000 / (2 * 18.0 + 9 * 1.4)
    assert continuous_driver(in_phase, 2, 8).steps_per_s > 1.15 * continuous_driver(in_phase, 2, 2).steps_per_s
    rec = recommend(in_phase)
    assert rec.workers == 2 and rec.slots_per_worker >= 4
    # desynchronised slots spread the calls: one row per call already amortises the network
    assert continuous_driver(spread, 2, 1).steps_per_s > 1.1 * one_row.steps_per_s


def test_cpu_inference_shares_the_cores_with_the_workers():
    # a CPU network that keeps 2 cores busy: workers and driver compete on a 2-core box
    probe = recorded(cores=2, placement="driver", step_ms=1.5, inference=((1, 40.0), (8, 320.0)), steps_per_inference=10)
    probe = dataclasses.replace(probe, policy=dataclasses.replace(
        probe.policy, inference=tuple(dataclasses.replace(p, cpu_util=2.0) for p in probe.policy.inference)))
    c = continuous_driver(probe, 2, 4)
    assert c.bound == "cpu"
    core_ms_per_step = 1.5 + (40.0 / 10)  # sim + amortised inference, in core-ms per row... roughly
    assert c.steps_per_s < 2 * 1000 / 1.5  # less than the simulation alone could do
    assert c.steps_per_s > 1000 / (2 * core_ms_per_step)


def test_memory_bound_caps_workers_and_says_so():
    rec = recommend(recorded(cores=32, mem_gib=4.0, worker_rss_mib=600.0))
    # 4 GiB * 0.8 - 500 MiB of driver policy, / (600 + 500 MiB per worker-placed policy copy)
    assert rec.workers == 2
    assert rec.bottleneck.startswith("memory-bound")
    assert any("memory" in r for r in rec.reasons)


def test_several_gpus_get_one_local_shard_each():
    probe = recorded(cores=32, gpus=4, device="cuda", placement="driver", step_ms=1.0,
                     inference=((1, 5.0), (64, 6.0), (128, 12.0)))
    rec = recommend(probe)
    assert rec.num_shards == 4
    assert rec.workers <= 8  # each shard gets its share of the cores
    flags = tune.recommended_flags(rec)
    assert "--eval.num_shards=4" in flags and "--executor=shards" in flags and not any("launch" in f for f in flags)
    assert "--render_device=gpu" in flags


def test_gpu_memory_bounds_the_batch():
    # 140 GB free, 2 GB of activations per row -> at most ~55 rows per call
    probe = recorded(cores=64, gpus=1, device="cuda", placement="driver", step_ms=1.0,
                     inference=((1, 5.0), (64, 5.0), (128, 5.0)), peak_bytes_per_row=2 * 10**9)
    rec = recommend(probe)
    assert rec.max_rows_per_call is not None and rec.max_rows_per_call <= 60
    assert rec.workers * rec.slots_per_worker / 2 <= rec.max_rows_per_call
    flags = tune.recommended_flags(rec)
    assert f"--policy.max_batch_size={rec.max_rows_per_call}" in flags
    assert not any(f.startswith("--eval.batch_size") for f in flags)  # that is lockstep's envs per batch


def test_amp_is_recommended_on_gpu_only_when_measured_faster_and_never_applied():
    fast = recorded(gpus=1, device="cuda", placement="driver", inference=((1, 10.0), (64, 40.0)), amp_speedup=2.0)
    same = recorded(gpus=1, device="cuda", placement="driver", inference=((1, 10.0), (64, 40.0)), amp_speedup=1.05)
    assert recommend(fast).use_amp and not recommend(same).use_amp
    assert not recommend(recorded(placement="driver", inference=((1, 10.0),))).use_amp  # CPU: never


def test_policies_without_slot_state_get_lockstep_batches():
    probe = recorded(cores=8, placement="driver", per_slot_state=False, step_ms=20.0, n_episodes=32,
                     inference=((1, 5.0), (32, 6.0)), constant=True, episode_steps=300)
    rec = recommend(probe)
    assert rec.mode == "lockstep"
    assert rec.use_async_envs  # 20 ms steps: worth stepping the batch in subprocesses
    flags = tune.recommended_flags(rec)
    assert "--eval.mode=lockstep" in flags and f"--eval.batch_size={rec.envs_per_batch}" in flags
    assert rec.envs_per_batch is not None and rec.envs_per_batch >= 8 and rec.max_rows_per_call is None
    assert rec.workers == 8 and "--workers=8" in flags  # the batch's envs step in one env worker per core


def test_worker_placement_rate_follows_the_measured_step():
    a = continuous_worker(recorded(cores=2, step_ms=0.2, step_all_ms=0.2), 2)
    b = continuous_worker(recorded(cores=2, step_ms=0.4, step_all_ms=0.4), 2)
    assert a.steps_per_s > 1.5 * b.steps_per_s


def test_probe_json_round_trip():
    probe = recorded(gpus=2, device="cuda", placement="driver", inference=((1, 5.0), (8, 6.0)), peak_bytes_per_row=10**6)
    assert Probe.from_dict(json.loads(json.dumps(probe.to_dict()))) == probe


def test_eval_command_keeps_the_users_flags_and_replaces_scheduling():
    rec = recommend(recorded(cores=4))
    flags = {"env.type": "metaworld", "env.task": "mt10", "policy.type": "expert", "workers": "9", "tune.budget_s": "5"}
    cmd = tune.eval_command(flags, rec)
    assert cmd.startswith("rollbench eval --env.type=metaworld --env.task=mt10 --policy.type=expert")
    assert "--workers=9" not in cmd and "--tune.budget_s" not in cmd
    assert f"--workers={rec.workers}" in cmd


# -- real probes ----------------------------------------------------------------------


# no videos, in tune as in eval (the test harness adds it to eval only): a stored probe's kind includes them
FAKE = ["--env.type=fake", "--env.step_sleep_s=0.002", "--env.max_steps=30", "--policy.type=expert", "--eval.n_episodes=6",
        "--eval.max_episodes_rendered=0"]


def test_real_probe_measures_and_predicts(cli, tmp_path: Path):
    out = tmp_path / "tune.json"
    r = cli("tune", *FAKE, "--tune.budget_s=4", f"--tune.output={out}")
    assert r.rc == 0, r.err
    data = json.loads(out.read_text())
    probe = Probe.from_dict(data["probe"])
    # every figure says how it is known
    for part in (probe.machine, probe.env, probe.policy):
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            if hasattr(value, "source"):
                assert value.source in ("measured", "estimated"), (f.name, value)
    # a 2 ms sleeping step is measured as such (plus the env's own microseconds)
    assert 1.9 < probe.env.step_ms_1.v < 6.0
    assert probe.env.episode_steps.source == "measured"  # the expert ran in the probe, all 3 tasks
    assert probe.policy.placement == "worker"
    rec = data["recommendation"]
    assert data["predicted_steps_per_s"] > 0 and data["predicted_wall_s"] > 0
    assert rec["workers"] >= 1 and "simulation-bound" in rec["bottleneck"]
    # the steady rate is workers x one step's rate
    expected = rec["workers"] * 1000.0 / probe.env.step_ms_1.v
    assert 0.5 * expected < rec["steady_steps_per_s"] < 1.1 * expected
    assert "rollbench eval --env.type=fake" in r.out and "[measured" in r.out and "simulation-bound" in r.out
    assert data["command"] in r.out


def test_eval_workers_auto_uses_a_saved_probe_and_results_do_not_change(cli, tmp_path: Path):
    saved = tmp_path / "tune.json"
    assert cli("tune", *FAKE, "--tune.budget_s=3", f"--tune.output={saved}").rc == 0
    auto, plain = tmp_path / "auto", tmp_path / "plain"
    r = cli("eval", *FAKE, "--workers=auto", f"--tune.load={saved}", f"--output_dir={auto}")
    assert r.rc == 0, r.err
    assert cli("eval", *FAKE, "--workers=1", f"--output_dir={plain}").rc == 0
    info = load_info(auto)
    assert info["tune"]["predicted_steps_per_s"] > 0
    assert info["scheduling"]["workers"] == json.loads(saved.read_text())["recommendation"]["workers"]
    assert per_episode(auto) == per_episode(plain)


def test_eval_workers_auto_probes_when_asked_to(cli, tmp_path: Path):
    out = tmp_path / "run"
    r = cli("eval", *FAKE, "--workers=auto", "--tune.reprobe=true", "--tune.budget_s=2", f"--output_dir={out}")
    assert r.rc == 0, r.err
    assert "--workers=auto: measuring" in r.err and "--workers=auto: probed in" in r.err
    info = load_info(out)
    assert info["tune"]["probe"]["how"] == "measured"
    assert info["tune"]["predicts"].startswith("env-steps / overall.eval_s")
    flags = dict(f[2:].split("=", 1) for f in info["tune"]["flags"])
    # the recommendation is what ran: the pool started the workers and slots it names
    assert int(flags["workers"]) == info["scheduling"]["workers"] >= 1
    assert int(flags["slots_per_worker"]) == info["scheduling"]["slots_per_worker"]
    assert len(list((out / "logs").glob("worker-*.log"))) == info["scheduling"]["workers"]
    assert info["tune"]["predicted_steps_per_s"] > 0 and info["tune"]["predicted_wall_s"] > 0


def test_a_run_too_short_to_pay_for_a_probe_runs_with_the_defaults(cli, tmp_path: Path, _own_cache: Path):
    r = cli("eval", *FAKE, "--workers=auto", f"--output_dir={tmp_path}")
    assert r.rc == 0, r.err
    assert "--workers=auto: no probe: this run takes at most" in r.err and "measuring" not in r.err
    info = load_info(tmp_path)
    assert info["tune"]["probe"]["how"] == "skipped" and info["tune"]["flags"] == []
    assert info["scheduling"]["workers"] >= 1  # the scheduler's own rules decided
    assert not _own_cache.exists()  # nothing measured, nothing stored


def test_tune_stores_its_probe_and_eval_workers_auto_reuses_it(cli, tmp_path: Path, _own_cache: Path):
    r = cli("tune", *FAKE, "--tune.budget_s=3", f"--tune.output={tmp_path / 'tune.json'}")
    assert r.rc == 0, r.err
    stored = list(_own_cache.glob("*.json"))
    assert len(stored) == 1 and f"stored in {stored[0]}" in r.out
    out = tmp_path / "run"
    r = cli("eval", *FAKE, "--workers=auto", f"--output_dir={out}")
    assert r.rc == 0, r.err
    assert f"--workers=auto: probe reused from {stored[0]}" in r.err and "measuring" not in r.err
    info = load_info(out)
    assert info["tune"]["probe"]["how"] == "reused" and info["tune"]["probe"]["path"] == str(stored[0])
    assert info["tune"]["flags"] and info["tune"]["predicted_steps_per_s"] > 0
    # a fresh probe when asked, though one is stored
    again = tmp_path / "again"
    r = cli("eval", *FAKE, "--workers=auto", "--tune.reprobe=true", "--tune.budget_s=2", f"--output_dir={again}")
    assert r.rc == 0, r.err
    assert load_info(again)["tune"]["probe"]["how"] == "measured" and "reused" not in r.err


def _fake_cfg(*extra: str) -> Any:
    return config_from_flags(dict(f[2:].split("=", 1) for f in [*FAKE, *extra]))


def test_a_stored_probe_fits_only_its_benchmark_policy_and_versions(monkeypatch: pytest.MonkeyPatch, _own_cache: Path):
    cfg = _fake_cfg()
    probe = dataclasses.replace(recorded(cores=2), env=dataclasses.replace(recorded(cores=2).env, windows=4))
    path = cache.store(cfg, probe)
    assert path is not None and path.parent == _own_cache  # $XDG_CACHE_HOME is honoured
    hit = cache.lookup(cfg, ())
    assert hit.probe == probe and hit.path == path
    assert cache.lookup(_fake_cfg("--eval.n_episodes=60"), ()).probe == probe  # the run's size is not its kind
    for other in (_fake_cfg("--env.task=near"), _fake_cfg("--env.max_steps=31"), _fake_cfg("--policy.type=random"),
                  _fake_cfg("--eval.max_episodes_rendered=2")):
        miss = cache.lookup(other, ())
        assert miss.probe is None and "no stored probe" in miss.why
    assert cache.lookup(cfg, (GpuInfo(0, "H200", 1, 1),)).probe is None  # another machine
    real = cache.versions
    monkeypatch.setattr(cache, "versions", lambda c: {**real(c), "gymnasium": "0.0.1"})
    stale = cache.lookup(cfg, ())
    assert stale.probe is None and "other versions (gymnasium " in stale.why and "-> 0.0.1" in stale.why
    path.write_text("{not json")
    assert "could not be read" in cache.lookup(cfg, ()).why


def test_the_probe_budget_is_a_share_of_the_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(FakeConfig, "step_cost_ms", property(lambda self: 5.0))
    cfg = _fake_cfg("--eval.n_episodes=200", "--tune.budget_s=30")  # 3 tasks x 200 x 30 steps x 5 ms on 2 cores
    units = plan_for(cfg)
    est = budget.first_estimate_s(cfg, units, 2)
    assert est == pytest.approx(budget.STARTUP_GUESS_S + 600 * 30 * 5.0 / 1000 / 2)
    assert budget.probe_budget(cfg, units, 2) == pytest.approx(budget.PROBE_SHARE * est)
    capped = _fake_cfg("--eval.n_episodes=200", "--tune.budget_s=3")
    assert budget.probe_budget(capped, units, 2) == 3.0  # never more than --tune.budget_s
    small = _fake_cfg("--eval.n_episodes=2")
    assert budget.probe_budget(small, plan_for(small), 2) == 0.0  # below what any probe costs: none


def test_windows_fit_the_budget_they_are_given():
    assert plan_windows(0.0, 2).n == 0
    assert plan_windows(100.0, 2) == type(plan_windows(0.0, 2))(TARGET_WINDOWS, MAX_WINDOW_S)
    for b in (0.3, 1.0, 2.5, 7.0):
        plan = plan_windows(b, 2)
        assert plan.n >= 1 and 2 * plan.n * plan.seconds <= b + 1e-9


def test_eval_workers_auto_keeps_its_windows_within_a_share_of_the_run(tmp_path: Path):
    """The same probe, given a tenth of a tiny run's wall, measures no window (the warm-up's
    figures only) and stores nothing; given --tune.budget_s alone, it measures windows."""
    cfg = _fake_cfg("--tune.budget_s=3")
    auto = tune.measure(cfg, budget_s=3.0, wall_share=budget.PROBE_SHARE)
    assert auto.env.windows == 0 and auto.env.step_ms_all.source == "measured"
    assert "no window fitted the budget" in auto.env.step_ms_all.note
    assert tune._store(cfg, auto) is None
    full = tune.measure(cfg, budget_s=3.0)
    assert full.env.windows >= 1 and "trimmed mean of" in full.env.step_ms_all.note


def test_a_preempted_window_does_not_move_the_figure():
    # 11 windows of push at ~0.5 ms per step, one preempted by another process (5 ms)
    windows = [0.50, 0.49, 0.51, 0.50, 0.52, 0.48, 0.50, 5.0, 0.49, 0.51, 0.50]
    assert trimmed_mean(windows) == pytest.approx(0.50, abs=0.01)
    assert sum(windows) / len(windows) > 0.9  # the mean would move by 80%
    assert trimmed_mean([0.5, 0.5, 9.0]) == 0.5  # three: the median
    s = _Samples()
    for ms in windows:
        s.add("solo", {"push": [100, ms / 10, ms / 10 * 1.2, 0.0]})
        s.add("together", {"push": [100, ms / 10 * 1.3, ms / 10 * 1.5, 0.0]})
    solo, together, ratio = _regimes(s.step, ["push"])
    assert solo["push"] == pytest.approx(0.50, abs=0.01) and together["push"] == pytest.approx(0.65, abs=0.015)
    assert ratio == pytest.approx(1.3, rel=0.01)


def test_the_prediction_is_what_eval_info_reports_start_up_excluded():
    probe = recorded(cores=2, step_ms=0.5)
    rec = recommend(probe)
    assert rec.predicted_steps_per_s == pytest.approx(rec.predicted_total_steps / rec.predicted_eval_s)
    # the start-up (launch, policy load, worker start, first env) is outside eval_s
    assert rec.predicted_wall_s - rec.predicted_eval_s >= LAUNCH_S + probe.policy.load_s.v + probe.env.worker_start_s.v
    assert rec.predicted_steps_per_s > rec.predicted_total_steps / rec.predicted_wall_s


def test_worker_placement_rate_follows_the_measured_loop_together():
    base = recorded(cores=2, step_ms=0.3)
    env = dataclasses.replace(base.env, parallel=2, loop_ms_1=measured(0.45), loop_ms_all=measured(0.6))
    probe = dataclasses.replace(base, env=env)
    assert continuous_worker(probe, 2).steps_per_s == pytest.approx(2 * 1000 / 0.6)
    assert continuous_worker(probe, 1).steps_per_s == pytest.approx(1000 / 0.45)
    assert continuous_worker(probe, 4).steps_per_s == pytest.approx(2 * 1000 / 0.6)  # time-sliced


def test_real_probe_of_a_driver_policy_times_batches(cli, tmp_path: Path):
    out = tmp_path / "tune.json"
    r = cli("tune", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_policies:make_chunky",
            "--policy.placement=driver", "--eval.n_episodes=8", "--tune.budget_s=4", f"--tune.output={out}")
    assert r.rc == 0, r.err
    probe = Probe.from_dict(json.loads(out.read_text())["probe"])
    batches = [p.batch for p in probe.policy.inference]
    assert batches[:3] == [1, 2, 4]
    assert all(p.full_ms > 0 for p in probe.policy.inference)
    assert probe.env.episode_steps.source == "estimated"  # a driver policy does not run in the probe


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tune.budget_s=0"], "--tune.budget_s=0.0 is not allowed"),
        (["--tune.load=/nope.json", "--workers=auto"], "--tune.load=/nope.json: not a `rollbench tune` JSON"),
        (["--workers=lots"], "--workers='lots'"),
        (["--tune.bogus=1"], "unknown flag --tune.bogus"),
    ],
)
def test_bad_tune_flags_are_one_line_errors(cli, tmp_path: Path, flags: list[str], needle: str):
    r = cli("eval", *FAKE, *flags, f"--output_dir={tmp_path}")
    assert r.rc == 2
    assert needle in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_cpu_driver_inference_uses_the_threads_the_workers_leave():
    # 8 cores: torch at 8 threads 10 ms per call, at 1 thread 40 ms; 6 workers leave 2 threads
    probe = recorded(cores=8, placement="driver", inference=((1, 10.0),), step_ms=0.1)
    probe = dataclasses.replace(probe, policy=dataclasses.replace(
        probe.policy, threads=8, inference_1t=(InferencePoint(1, 40.0, 0.05, 1.0),)))
    from rollbench.tune.model import driver_threads, infer_ms

    assert driver_threads(probe, 6) == 2 and driver_threads(probe, 8) == 1
    assert infer_ms(probe, 1, threads=1) == pytest.approx(40.0)
    assert infer_ms(probe, 1, threads=8) == pytest.approx(10.0)
    assert 10.0 < infer_ms(probe, 1, threads=2) < 40.0
    assert continuous_driver(probe, 2, 1).steps_per_s > continuous_driver(probe, 8, 1).steps_per_s / 4


def test_auto_mode_in_the_model_is_decides_own_rule():
    """--eval.mode=auto with --eval.isolation=none runs lockstep (decide.auto_mode): tune's
    candidates are lockstep ones too, not continuous ones the run could never take."""
    assert {c.mode for c in candidates(recorded(cores=4, step_ms=1.0))} == {"continuous"}
    assert {c.mode for c in candidates(recorded(cores=4, step_ms=1.0, same_process=True))} == {"lockstep"}
    assert {c.mode for c in candidates(recorded(cores=4, step_ms=1.0, per_slot_state=False))} == {"lockstep"}
