"""Policies that change their own weights while they act (test-time training).

Such a policy is refused at its first change, in one line naming the flag, before any episode
is logged; with --policy.fresh_weights=true every episode acts with its own copy of the weights,
so per-episode results do not depend on the workers, the mode or the batch (the fake
benchmark's reward is minus the distance to the target: equal reward sums mean equal actions).
A LeRobot checkpoint, which only reads its weights, is not flagged.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import load_info, per_episode
from rollbench.benchmarks.fake import FakeConfig
from rollbench.config.policy import PolicyConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError, PolicyError
from rollbench.policies.base import EpisodeStart
from rollbench.policies.module import ModulePolicy
from rollbench.policies.weights import FreshWeights, WeightWatch
from ttt_policy import SelfTrainingPolicy

TTT = ("eval", "--env.type=fake", "--policy.type=module", "--policy.path=ttt_policy:make", "--eval.n_episodes=4")


def error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("rollbench:")]
    assert len(lines) == 1, err
    return lines[0]


def test_the_test_policy_really_drifts():
    policy = SelfTrainingPolicy()
    twin = copy.deepcopy(policy)
    batch = {"observation.environment_state": np.array([[0.0, 0.0, 1.0, -1.0]])}
    torch.manual_seed(0)
    first = policy.act(batch, [0])
    torch.manual_seed(0)
    assert np.array_equal(twin.act(batch, [0]), first)  # a copy starts where the policy started
    torch.manual_seed(0)
    assert not np.allclose(policy.act(batch, [0]), first)  # and one call taught it something


@pytest.mark.parametrize("flags", [
    ("--workers=1",),  # continuous, policy in this process
    ("--workers=1", "--policy.placement=worker"),  # continuous, policy in the env worker
    ("--eval.mode=lockstep", "--eval.batch_size=3"),
])
def test_a_policy_that_trains_at_test_time_is_refused_before_any_episode(cli, tmp_path, flags):
    res = cli(*TTT, *flags, f"--output_dir={tmp_path}")
    assert res.rc == 1, res.err
    line = error_line(res.err)
    assert "ttt_policy:make" in line and "changed 2 of its 2 parameter tensors since its first call" in line
    assert "--policy.fresh_weights=true" in line
    assert not (tmp_path / "eval_info.json").exists()
    assert all(not f.read_text() for f in (tmp_path / "episodes").glob("*.jsonl"))  # no episode logged


def test_fresh_weights_results_do_not_depend_on_workers_mode_or_batch(cli, tmp_path):
    variants = {
        "w1": ("--workers=1",),
        "w2": ("--workers=2",),
        "w2_in_workers": ("--workers=2", "--policy.placement=worker"),
        "lockstep_b3": ("--eval.mode=lockstep", "--eval.batch_size=3", "--workers=2"),
        "lockstep_here": ("--eval.mode=lockstep", "--eval.batch_size=4", "--eval.isolation=none"),
        "lockstep_threads": ("--eval.mode=lockstep", "--eval.batch_size=2", "--eval.max_parallel_tasks=3"),
    }
    results = {}
    for name, extra in variants.items():
        res = cli(*TTT, "--policy.fresh_weights=true", *extra, f"--output_dir={tmp_path / name}")
        assert res.rc == 0, (name, res.err)
        results[name] = per_episode(tmp_path / name)
    reference = results["w1"]
    assert len(reference) == 12
    assert len({(o[0], o[1], o[3]) for o in reference.values()}) > 6  # episodes differ: the comparison means something
    for name, got in results.items():
        assert got == reference, f"{name} differs from w1"
    assert load_info(tmp_path / "w1")["config"]["policy"]["fresh_weights"] is True


def test_the_watch_sees_in_place_writes_and_replaced_parameters():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    watch = WeightWatch([net])
    assert len(watch) == 4 and watch.changed() == 0
    with torch.no_grad():
        net(torch.ones(1, 2))  # reading is not writing
    assert watch.changed() == 0
    net[1].bias = torch.nn.Parameter(torch.zeros(1))  # a new object, no in-place write
    assert watch.changed() == 1
    with torch.no_grad():
        net[0].weight.mul_(2.0)
    assert watch.changed() == 2


class _SharesOnCopy(SelfTrainingPolicy):
    def __deepcopy__(self, memo: dict) -> _SharesOnCopy:
        return self  # its "copies" are the policy itself


def test_fresh_weights_names_copies_that_share_the_weights():
    bench = FakeConfig(task="near")
    ctx = StepContext(bench, PolicyConfig(type="module", path="ttt_policy:make", fresh_weights=True))
    policy = FreshWeights(ModulePolicy(_SharesOnCopy(), "shares"))
    policy.reset([0], [EpisodeStart("all", "near", "", 0, 1)])
    obs = {"agent_pos": np.zeros((1, 2)), "environment_state": np.array([[0.0, 0.0, 0.2, 0.1]])}
    with pytest.raises(PolicyError, match="its deepcopy shares its weights"):
        ctx.act(policy, obs, [0], [""])


@pytest.mark.parametrize("flags, expected", [
    ({"type": "lerobot", "seeding": "lerobot-eval"}, "--policy.seeding=episode with it"),
    ({"type": "remote"}, "--policy.type=remote policy keeps in its server"),
])
def test_fresh_weights_refuses_what_it_cannot_make_exact(flags, expected):
    with pytest.raises(ConfigError, match=expected):
        PolicyConfig(fresh_weights=True, **flags)


def test_fresh_weights_is_listed_in_help(cli):
    res = cli("eval", "--help")
    assert res.rc == 0 and "--policy.fresh_weights" in res.out


@pytest.mark.lerobot
@pytest.mark.parametrize("policy_type", ["act", "diffusion"])
def test_a_lerobot_checkpoint_is_not_flagged(cli, tmp_path, policy_type):
    from lerobot_helpers import make_checkpoint

    bench = FakeConfig(task="near")
    ckpt = make_checkpoint(tmp_path / "ckpt", bench, policy_type=policy_type, action_mean=0.0, action_std=1.0)
    # the watch really sees its weights (so "not flagged" is not a watch on nothing)
    ctx = StepContext(bench, PolicyConfig(type="lerobot", path=str(ckpt), use_amp=True))
    policy = ctx.make_policy()
    try:
        policy.reset([0], [EpisodeStart("all", "near", "", 0, 1)])
        obs = {"agent_pos": np.zeros((1, 2)), "environment_state": np.array([[0.0, 0.0, 0.2, 0.1]])}
        for _ in range(3):
            ctx.act(policy, obs, [0], [""])
        watch = next(w for _, w in ctx.watches.values())
        assert watch is not None and len(watch) > 10 and watch.changed() == 0
    finally:
        policy.close()
    if policy_type != "act":
        return
    base = ("eval", "--env.type=fake", "--env.task=near", "--policy.type=lerobot", f"--policy.path={ckpt}",
            "--eval.n_episodes=3", "--env.max_steps=8")
    runs = {
        "amp": ("--policy.use_amp=true", "--workers=1"),
        "lockstep": ("--eval.mode=lockstep", "--eval.isolation=none"),
        "fresh": ("--policy.fresh_weights=true", "--eval.mode=lockstep", "--eval.isolation=none"),
    }
    results = {}
    for name, extra in runs.items():
        res = cli(*base, *extra, f"--output_dir={tmp_path / name}")
        assert res.rc == 0, (name, res.err)
        results[name] = per_episode(tmp_path / name)
    # a policy that only reads its weights: the same episodes, one row per call instead of three
    # (float sums in another order: rewards equal to ~1e-7)
    for key, plain in results["lockstep"].items():
        fresh = results["fresh"][key]
        assert (fresh[0], fresh[3], fresh[4]) == (plain[0], plain[3], plain[4])
        assert fresh[1] == pytest.approx(plain[1], abs=1e-5)


def test_rollbench_serve_refuses_a_policy_that_trains_unless_each_episode_has_fresh_weights(cli, tmp_path: Path) -> None:
    """Behind `rollbench serve` too: the first call that changes the weights is refused, and so is
    every later one (the weights stay changed), in one line naming the flag; with
    --policy.fresh_weights=true the served episodes are the local ones."""
    from helpers_remote import rollbench_server

    flags = ("--env.type=fake", "--eval.n_episodes=2", "--workers=1")
    with rollbench_server(policy__type="module", policy__path="ttt_policy:make", env__type="fake") as server:
        res = cli("eval", *flags, "--policy.type=remote", f"--policy.url={server.url}", f"--output_dir={tmp_path / 'r'}")
        tainted = server.server.tainted
    assert res.rc != 0
    assert tainted is not None and "changed 2 of its 2 parameter tensors since its first call" in tainted
    assert "--policy.fresh_weights=true" in res.err
    local = cli("eval", *flags, "--policy.type=module", "--policy.path=ttt_policy:make", "--policy.fresh_weights=true",
                f"--output_dir={tmp_path / 'local'}")
    assert local.rc == 0, local.err
    with rollbench_server(policy__type="module", policy__path="ttt_policy:make", policy__fresh_weights="true",
                          env__type="fake") as server:
        res = cli("eval", *flags, "--policy.type=remote", f"--policy.url={server.url}", "--policy.replan_steps=1",
                  f"--output_dir={tmp_path / 'served'}")
        assert server.server.tainted is None
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "served") == per_episode(tmp_path / "local")
