"""config/codec.py: flags -> RunConfig -> flags is the identity, and so is the command a merge
writes for its run (`rerun_argv`)."""

from __future__ import annotations

import logging

import pytest

from rollbench.config.codec import config_from_dict, config_from_flags, rerun_argv, to_argv, to_flags
from rollbench.errors import ConfigError

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


SHARDED = {"env.type": "fake", "policy.type": "expert", "eval.num_shards": "2", "output_dir": "o"}


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """rollbench's warnings, also after a CLI run in this process stopped them propagating."""
    monkeypatch.setattr(logging.getLogger("rollbench"), "propagate", True)
    return caplog


@pytest.mark.parametrize("old", [{"launch": "local"}, {"launch": "local", "executor": "local"}])
def test_launch_local_is_read_as_the_shards_executor_with_one_warning(old: dict[str, str], caplog) -> None:
    """The old spelling is the same run as the new one: the same config, so the same identity
    (run.json, the owners' check), whichever of the two started a run and which resumes it."""
    with caplog.at_level("WARNING", logger="rollbench"):
        cfg = config_from_flags({**SHARDED, **old})
    assert [r.getMessage() for r in caplog.records] == ["--launch=local is now --executor=shards; the old spelling still works"]
    new = config_from_flags({**SHARDED, "executor": "shards"})
    assert cfg == new and cfg.executor == "shards"
    assert cfg.identity() == new.identity() == config_from_flags(SHARDED).identity()
    assert "launch" not in cfg.to_dict()


def test_launch_none_is_silent_and_other_values_are_refused(caplog) -> None:
    with caplog.at_level("WARNING", logger="rollbench"):
        assert config_from_flags({**SHARDED, "launch": "none"}) == config_from_flags(SHARDED)
    assert not caplog.records
    with pytest.raises(ConfigError, match=r"^--launch=ray is not allowed; it takes none or local \(--launch=local is "
                                          r"now --executor=shards\)$"):
        config_from_flags({**SHARDED, "launch": "ray"})
    with pytest.raises(ConfigError, match=r"^--executor=ray with --launch=local is not allowed"):
        config_from_flags({**SHARDED, "launch": "local", "executor": "ray"})


def test_a_config_stored_with_launch_is_read_without_a_warning(caplog) -> None:
    """run.json and eval_info.json (schema 3) written before --executor=shards hold `launch`;
    a merge rebuilds their run from them, and writes the command of that run as one process."""
    stored = config_from_flags(SHARDED).to_dict()
    with caplog.at_level("WARNING", logger="rollbench"):
        assert config_from_dict({**stored, "launch": "local"}) == config_from_flags({**SHARDED, "executor": "shards"})
        assert config_from_dict({**stored, "launch": "none"}) == config_from_flags(SHARDED)
    assert not caplog.records
    for data in ({**stored, "launch": "local"}, config_from_flags({**SHARDED, "executor": "shards"}).to_dict()):
        argv = rerun_argv(data)
        assert not any(a.startswith(("--executor", "--launch", "--eval.num_shards")) for a in argv), argv
