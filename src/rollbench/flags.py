"""Flags of one group (`--env.*`, `--policy.*`) into their config objects, for every command
that takes them (`rollbench eval` and `tune` through the CLI, `rollbench serve`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from rollbench.config.codec import to_flags
from rollbench.config.env import BENCHMARKS, BenchmarkConfig
from rollbench.config.fields import build
from rollbench.config.policy import PolicyConfig
from rollbench.errors import ConfigError, UnknownNameError, did_you_mean
from rollbench.policies.base import POLICIES
from rollbench.policies.lerobot_plugins import PLUGIN_PREFIX, lerobot_types


def group(flags: dict[str, str], prefix: str) -> dict[str, str]:
    """Take the flags under `prefix` out of `flags`, the prefix stripped."""
    return {k[len(prefix) :]: flags.pop(k) for k in list(flags) if k.startswith(prefix)}


def benchmark_from_flags(env_flags: dict[str, str]) -> BenchmarkConfig:
    env_type = env_flags.pop("type", None)
    if not env_type:
        raise ConfigError(f"--env.type is required; known benchmarks: {', '.join(BENCHMARKS.names())}")
    try:
        cls = BENCHMARKS.get(env_type)
    except ConfigError as err:
        raise ConfigError(f"--env.type={env_type!r}: {err}") from None
    return build(cls, env_flags, "env.")


def lerobot_type(ptype: str, path: str | None) -> str:
    """`--policy.type=act --policy.path=DIR`, lerobot-eval's spelling: a LeRobot (or installed
    plugin's) policy type means rollbench's LeRobot adapter, checked against the checkpoint.
    Anything else is an unknown type, named with every type known here. A name no LeRobot or
    plugin source declares is refused without importing LeRobot (its policy configs import
    torch and transformers: ~20 s on a busy machine)."""
    ours = POLICIES.names()
    theirs: list[str] = []
    if importlib.util.find_spec("lerobot") is not None:
        declared = declared_lerobot_types()
        if declared is not None and (ptype not in declared[1] or (ptype in declared[0] and not path)):
            theirs = sorted(declared[0])
        else:
            theirs = lerobot_types()
    if ptype in theirs:
        if not path:
            raise ConfigError(f"--policy.type={ptype} is a LeRobot policy type: give its checkpoint with "
                              f"--policy.path=DIR (or a hub id ORG/NAME); rollbench evaluates no untrained policy")
        return ptype
    hint = did_you_mean(ptype, [*ours, *theirs])
    lerobot = f"; LeRobot's and its plugins' (with --policy.path): {', '.join(theirs)}" if theirs else ""
    raise ConfigError(f"--policy.type={ptype!r}: no policy type named {ptype!r}.{hint} Known: {', '.join(ours)}{lerobot}.")


_REGISTERS = re.compile(r"register_subclass\(\s*(?:name\s*=\s*)?[\"']([\w.-]+)[\"']")
_IMPORTED_CONFIG = re.compile(r"^from \.(\w+)\.(configuration_\w+) import", re.MULTILINE)


def declared_lerobot_types() -> tuple[set[str], set[str]] | None:
    """The policy types LeRobot's source and the installed `lerobot_policy_*` plugins declare
    (`@PreTrainedConfig.register_subclass("act")`), read, not imported: (those LeRobot's
    `lerobot.policies` registers on import, with the plugins', as `lerobot_types()` lists them;
    every one declared anywhere). None: LeRobot's source is not where it is expected."""
    spec = importlib.util.find_spec("lerobot")
    roots = [Path(p) / "policies" for p in (spec.submodule_search_locations or [])] if spec else []
    if not roots or not (roots[0] / "__init__.py").is_file():
        return None
    imported, everywhere = set(), set()
    try:
        for root in roots:
            for config in root.rglob("configuration_*.py"):
                everywhere |= set(_REGISTERS.findall(config.read_text(encoding="utf-8", errors="replace")))
            init = (root / "__init__.py").read_text(encoding="utf-8", errors="replace")
            for package, module in _IMPORTED_CONFIG.findall(init):
                config = root / package / f"{module}.py"
                if config.is_file():
                    imported |= set(_REGISTERS.findall(config.read_text(encoding="utf-8", errors="replace")))
        for dist in metadata.distributions():
            if not str(dist.metadata["Name"] or "").replace("-", "_").startswith(PLUGIN_PREFIX):
                continue
            for file in dist.files or []:
                if file.suffix == ".py":
                    found = set(_REGISTERS.findall(Path(str(dist.locate_file(file))).read_text(encoding="utf-8", errors="replace")))
                    imported |= found
                    everywhere |= found
    except OSError:
        return None
    return (imported or everywhere), everywhere


def policy_from_flags(policy_flags: dict[str, str]) -> PolicyConfig:
    known = {f.name for f in dataclasses.fields(PolicyConfig)} - {"options"}
    options = {k: v for k, v in policy_flags.items() if k not in known}
    base = {k: v for k, v in policy_flags.items() if k in known}
    if not base.get("type") and base.get("path"):
        # lerobot-eval's command line: --policy.path names a checkpoint and implies its kind
        if ":" in base["path"] and not os.path.isdir(base["path"]):
            raise ConfigError(
                f"--policy.path={base['path']} looks like a module policy (pkg.mod:factory); "
                f"add --policy.type=module (a LeRobot checkpoint directory needs no --policy.type)"
            )
        base["type"] = "lerobot"
    ptype = base.get("type", "")
    if ptype:
        try:
            factory = POLICIES.get(ptype)
        except UnknownNameError:
            base["type"], base["lerobot_type"] = "lerobot", lerobot_type(ptype, base.get("path"))
            ptype, factory = "lerobot", POLICIES.get("lerobot")
        except ConfigError as err:
            raise ConfigError(f"--policy.type={ptype!r}: {err}") from None
        options = _own_options(ptype, factory, options, known)
    return build(PolicyConfig, base, "policy.", options=options)


def _own_options(ptype: str, factory: Any, options: dict[str, str], known: set[str]) -> dict[str, str]:
    """A policy type's own `--policy.*` flags, each checked and spelled as its type spells it;
    one the type does not take is a one-line error with a did-you-mean."""
    own = getattr(factory, "options_class", None)  # a type's own flags, a dataclass
    takes = [f.name for f in dataclasses.fields(own)] if own is not None else []
    clash = sorted(set(takes) & known)
    if clash and own is not None:  # `--policy.<name>` would set PolicyConfig's field, never the type's own
        raise ConfigError(
            f"--policy.type={ptype}: its options ({own.__name__}) declare {', '.join(clash)}, a flag every "
            f"policy type takes (--policy.{clash[0]}); the plugin must give its own flag another name"
        )
    if own is not None or not getattr(factory, "accepts_options", False):
        for key in options:
            if key not in takes:
                hint = did_you_mean(key, sorted(known | set(takes)), "--policy.{}".format)
                its = f" Known: {', '.join('--policy.' + n for n in takes)}." if takes else ""
                raise ConfigError(f"unknown flag --policy.{key} for --policy.type={ptype}.{hint}{its} "
                                  f"See `rollbench eval --help`.")
    if own is None or not options:
        return options
    # each value checked now and spelled as its type spells it, so that `--policy.chunk_size=03`
    # is the run `=3` is (a run's identity compares the options), and a bad value is refused here
    typed = to_flags(dataclasses.asdict(build(own, options, "policy.")))
    return {key: typed.get(key, value) for key, value in options.items()}
