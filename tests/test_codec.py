"""config/codec.py: flags -> RunConfig -> flags is the identity, and so is the command a merge
writes for its run (`rerun_argv`)."""

from __future__ import annotations

import pytest

from rollbench.config.codec import config_from_dict, config_from_flags, rerun_argv, to_argv, to_flags

CASES = [
    {"env.type": "fake", "policy.type": "expert", "output_dir": "o"},
    {"env.type": "fake", "env.task": "near,far", "policy.type": "expert", "policy.chunk_size": "03",
     "eval.n_episodes": "7", "eval.perturb": "action.latency=2", "executor": "serial", "executor.fresh_env": "true",
     "seed": "3", "rename_map": '{"a": "b"}', "tune.budget_s": "5", "workers": "2", "output_dir": "o"},
    {"env.type": "pusht", "policy.type": "random", "policy.placement": "driver", "eval.ci_width": "0.3",
     "executor": "ray", "ray.address": "auto", "output_dir": "a dir"},
]


@pytest.mark.parametrize("flags", CASES)
def test_config_to_flags_and_back_is_the_identity(flags: dict[str, str]) -> None:
    cfg = config_from_flags(flags)
    assert config_from_dict(cfg.to_dict()) == cfg
    argv = rerun_argv(cfg.to_dict())
    assert argv[:2] == ["rollbench", "eval"] and set(argv[2:]) <= set(to_argv(to_flags(cfg.to_dict())))
    assert config_from_flags(dict(a[2:].split("=", 1) for a in argv[2:])) == cfg
