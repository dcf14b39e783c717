"""Per-episode results depend on (task, episode, seed, policy) only: not on batch size, on
env workers or same-process envs, sync or async.

Every run goes through the real CLI in lockstep mode and is compared bit for bit with the
others through the episodes recorded in `eval_info.json`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import per_episode


def run_variants(cli, tmp_path: Path, base: tuple[str, ...], variants: dict[str, tuple[str, ...]]) -> dict[str, dict]:
    results = {}
    for name, extra in variants.items():
        out = tmp_path / name
        res = cli("eval", "--eval.mode=lockstep", *base, *extra, f"--output_dir={out}")
        assert res.rc == 0, (name, res.err)
        results[name] = per_episode(out)
    return results


def assert_identical(results: dict[str, dict], tasks: dict[str, list[str]], n_episodes: int, seed: int = 1000) -> None:
    reference_name, reference = next(iter(results.items()))
    # the reference holds exactly the plan: every (group, task_id, episode) once, with seed `seed + i`
    expected_keys = {(g, tid, i) for g, names in tasks.items() for tid in range(len(names)) for i in range(n_episodes)}
    assert set(reference) == expected_keys
    for (_, _, i), outcome in reference.items():
        assert outcome[4] == seed + i
    for name, got in results.items():
        assert got == reference, f"{name} differs from {reference_name}"


def variety(results: dict) -> set:
    """Distinct (success, sum_reward, n_steps) outcomes: a comparison among identical episodes proves little."""
    return {(o[0], o[1], o[3]) for o in results.values()}


def lockstep_variants(n_episodes: int) -> dict[str, tuple[str, ...]]:
    return {
        "b1": ("--eval.batch_size=1",),
        "b3": ("--eval.batch_size=3",),  # a short last batch: padded envs must not leak into results
        "b10": ("--eval.batch_size=10",),  # larger than n_episodes: clamped
        "b3_w1": ("--eval.batch_size=3", "--workers=1"),  # the batch's envs in one env worker
        "b3_here": ("--eval.batch_size=3", "--eval.isolation=none"),  # same process, SyncVectorEnv
        "b3_async": ("--eval.batch_size=3", "--eval.isolation=none", "--eval.use_async_envs=true"),
    }


@pytest.mark.parametrize("policy", ["expert", "random"])
def test_fake_results_do_not_depend_on_batching(cli, tmp_path, policy):
    n = 7
    base = ("--env.type=fake", f"--policy.type={policy}", f"--eval.n_episodes={n}")
    results = run_variants(cli, tmp_path, base, lockstep_variants(n))
    assert_identical(results, {"all": ["near", "mid", "far"]}, n)
    assert len(variety(results["b1"])) > 3


def test_fake_seed_shifts_episodes(cli, tmp_path):
    # episode i of --seed=s is the episode with seed s+i: seed 1001's episode 0 is seed 1000's episode 1
    base = ("--env.type=fake", "--env.task=far", "--policy.type=random", "--eval.n_episodes=4")
    a = run_variants(cli, tmp_path, base, {"s1000": ("--seed=1000", "--eval.batch_size=4")})["s1000"]
    b = run_variants(cli, tmp_path, base, {"s1001": ("--seed=1001", "--eval.batch_size=2")})["s1001"]
    assert len(variety(a)) == 4  # every seed its own episode: a shift is visible
    for i in range(3):
        assert b[("far", 0, i)] == a[("far", 0, i + 1)]
        assert b[("far", 0, i)] != a[("far", 0, i)]


@pytest.mark.metaworld
def test_metaworld_results_do_not_depend_on_batching(cli, tmp_path):
    n = 4
    base = ("--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert", f"--eval.n_episodes={n}")
    results = run_variants(cli, tmp_path, base, lockstep_variants(n))
    assert_identical(results, {"reach-v3": ["reach-v3"], "push-v3": ["push-v3"]}, n)
    assert len(variety(results["b1"])) == 2 * n  # seeded goals: every episode is its own


@pytest.mark.pusht
def test_pusht_results_do_not_depend_on_batching(cli, tmp_path):
    n = 4
    base = (
        "--env.type=pusht", "--env.obs_type=state", "--env.episode_length=30",
        "--policy.type=random", f"--eval.n_episodes={n}",
    )
    results = run_variants(cli, tmp_path, base, lockstep_variants(n))
    assert_identical(results, {"pusht": ["PushT-v0"]}, n)
    assert len({o[1] for o in results["b1"].values()}) == n  # each seed gives its own rewards
    assert all(o[3] == 30 for o in results["b1"].values())  # --env.episode_length cuts every episode
