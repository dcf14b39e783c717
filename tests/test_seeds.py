"""`--seeds=S1,S2,...`: one run, one log; each seed's block is exactly the run `--seed=S`
gives, whatever the mode; results per seed, across seeds and pooled, in eval_info, the
table, report.html and compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_info, per_episode, run_subprocess

BASE = ("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=6", "--eval.report=false")
SEEDS = (1000, 2000, 3000)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    """One ordinary run per seed."""
    out = {}
    for seed in SEEDS:
        d = tmp_path_factory.mktemp(f"seed{seed}")
        res = run_subprocess(*BASE, f"--seed={seed}", f"--output_dir={d}")
        assert res.rc == 0, res.err
        out[seed] = per_episode(d)
    return out


@pytest.mark.parametrize("mode", [("--eval.mode=continuous", "--workers=2"), ("--eval.mode=lockstep", "--eval.batch_size=4")],
                         ids=["continuous", "lockstep"])
def test_each_seed_of_a_multi_seed_run_is_the_run_of_that_seed(tmp_path: Path, single: dict, mode: tuple[str, ...]) -> None:
    res = run_subprocess(*BASE, "--seeds=1000,2000,3000", *mode, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    got = per_episode(tmp_path)
    assert len(got) == 3 * 3 * 6
    for j, seed in enumerate(SEEDS):
        block = {(g, t, i - 6 * j): v for (g, t, i), v in got.items() if i // 6 == j}
        assert block == single[seed]
    info = load_info(tmp_path)
    assert [b["seed"] for b in info["per_seed"]] == list(SEEDS)
    rates = []
    for b, seed in zip(info["per_seed"], SEEDS, strict=True):
        wins = sum(v[0] for v in single[seed].values())
        assert (b["n_success"], b["n_episodes"]) == (wins, 18)
        rates.append(100 * wins / 18)
    mean = sum(rates) / 3
    assert info["across_seeds"]["pc_success_mean"] == pytest.approx(mean)
    assert info["across_seeds"]["pc_success_std"] == pytest.approx((sum((r - mean) ** 2 for r in rates) / 2) ** 0.5)
    assert info["overall"]["n_episodes"] == 54  # pooled
    task = info["per_task"][0]
    assert [b["n_episodes"] for b in task["per_seed"]] == [6, 6, 6]
    # the headline is the pooled rate and its Wilson interval; the seeds' spread is shown as
    # what it is, beside the spread episode noise alone gives, each task at its own rate (a
    # block pools 3 tasks of 6 episodes; the pooled rate's p(1-p) would count the spread between
    # the tasks' rates as noise, issue 47)
    across, overall = info["across_seeds"], info["overall"]
    assert across["pc_success"] == overall["pc_success"] and across["pc_success_ci95"] == overall["pc_success_ci95"]
    rates_t = [t["n_success"] / 18 for t in info["per_task"]]
    assert across["pc_success_std_from_noise"] == pytest.approx(100 * sum(6 * q * (1 - q) for q in rates_t) ** 0.5 / 18)
    p = overall["n_success"] / 54
    if len(set(rates_t)) > 1:  # tasks of different rates: less than the pooled rate's noise
        assert across["pc_success_std_from_noise"] < 100 * (p * (1 - p) / 18) ** 0.5
    lo, hi = overall["pc_success_ci95"]
    assert f"all 3 seeds pooled: {overall['pc_success']:.1f}% [{lo:.1f}, {hi:.1f}] (95% Wilson); per seed: 1000: " in res.out
    assert f"spread across seeds: sd {across['pc_success_std']:.1f} points" in res.out


def test_envs_see_the_episodes_index_within_its_seed(tmp_path: Path) -> None:
    """LIBERO picks episode i's initial state by i: a seed's block must start again at 0."""
    res = run_subprocess("eval", "--env.type=indexed", "--env.task=near", "--policy.type=expert", "--eval.n_episodes=4",
                         "--seeds=1000,2000", f"--output_dir={tmp_path}", ROLLBENCH_PLUGINS="faulty_bench")
    assert res.rc == 0, res.err[-2000:]
    assert load_info(tmp_path)["overall"]["n_failed"] == 0  # a wrong index fails the reset


def test_report_and_compare_show_seeds(tmp_path: Path) -> None:
    for name, noise in (("a", "0"), ("b", "3.0")):
        res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", f"--policy.action_noise={noise}",
                             "--eval.n_episodes=5", "--seeds=1000,2000", "--eval.report=true",
                             f"--output_dir={tmp_path / name}")
        assert res.rc == 0, res.err
    page = (tmp_path / "a" / "report.html").read_text()
    assert "<h2>Seeds</h2>" in page and "All 2 seeds pooled: <b>" in page and "Spread of the per-seed rates" in page
    res = run_subprocess("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert res.rc == 0, res.err
    assert "A per seed: 1000: " in res.out and "B per seed: 1000: " in res.out
    assert "McNemar (30 pairs)" in res.out  # both seeds' episodes paired by seed


@pytest.mark.parametrize(
    "flags, needle",
    [
        (("--seeds=1000,1000",), "the seeds must differ"),
        (("--seeds=1000,1003",), "overlaps seed 1003"),
        (("--seeds=1000,x",), "expected whole numbers"),
        (("--seeds=1000,2000", "--seed=5"), "give one of the two"),
    ],
)
def test_bad_seed_lists_are_one_line_errors(tmp_path: Path, flags: tuple[str, ...], needle: str) -> None:
    res = run_subprocess(*BASE, *flags, f"--output_dir={tmp_path}")
    assert res.rc == 2, res.err
    assert needle in res.err and "Traceback" not in res.err
    assert not (tmp_path / "run.json").exists()


ADAPTIVE_SEEDS = ("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=20", "--seeds=1000,2000,3000",
                  "--eval.report=false")


@pytest.fixture(scope="module")
def fixed_seeds(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("fixed_seeds")
    res = run_subprocess(*ADAPTIVE_SEEDS, f"--output_dir={out}")
    assert res.rc == 0, res.err
    return per_episode(out)


@pytest.mark.parametrize(
    "mode",
    [("--eval.mode=continuous", "--workers=2"), ("--eval.mode=lockstep", "--eval.batch_size=4"),
     ("--eval.num_shards=2", "--executor=shards")],
    ids=["continuous", "lockstep", "shards2"],
)
def test_seeds_with_ci_width_stop_on_prefixes_that_go_round_robin_over_the_seeds(
    tmp_path: Path, fixed_seeds: dict, mode: tuple[str, ...]
) -> None:
    """--seeds with --eval.ci_width: a task's prefixes take episode 0 of every seed, then
    episode 1, ... (a task stopped at 10 holds 4, 3 and 3 episodes of the three seeds, not 10
    of the first); the result is that prefix of the fixed multi-seed run, whatever the mode."""
    from rollbench.stopping.adaptive import StopRule, decide

    rule = StopRule(ci_width=0.3, block=10, max_episodes=60, seeds=3)
    assert [rule.position(e) for e in (0, 1, 20, 40, 21)] == [0, 3, 1, 2, 4]
    res = run_subprocess(*ADAPTIVE_SEEDS, "--eval.ci_width=0.3", *mode, f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    want = {}
    for key in {(g, t) for g, t, _ in fixed_seeds}:
        outcomes = {rule.position(i): v[0] for (g, t, i), v in fixed_seeds.items() if (g, t) == key}
        cut = decide(rule, outcomes).n_episodes
        assert cut is not None
        want.update({k: v for k, v in fixed_seeds.items() if k[:2] == key and rule.position(k[2]) < cut})
    assert per_episode(tmp_path) == want
    info = load_info(tmp_path)
    stops = [t["stop"]["n_episodes"] for t in info["per_task"]]
    assert min(stops) == 10 and all(t["stop"]["max_episodes"] == 60 for t in info["per_task"])
    first = next(t for t in info["per_task"] if t["stop"]["n_episodes"] == 10)
    assert [b["n_episodes"] for b in first["per_seed"]] == [4, 3, 3]
    assert info["adaptive"]["seeds"] == 3
    # the headline is `overall`: here the mean of the tasks' unbiased rates, not a pooled Wilson one
    assert info["across_seeds"]["pc_success"] == info["overall"]["pc_success"]
    assert "all 3 seeds: " in res.out and "the mean of 3 tasks' unbiased rates" in res.out and "Wilson" not in res.out
