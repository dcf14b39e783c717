"""Third-party LeRobot policies: the installed `lerobot_policy_*` distributions.

LeRobot (0.4.3 and later) imports every distribution whose name starts with
`lerobot_policy_` before it parses its flags (`register_third_party_plugins`); the import
registers the plugin's config class (`@PreTrainedConfig.register_subclass("x")`), and the
policy class and processors are then found by name (`XPolicy` in the sibling `modeling_x`).
rollbench imports them the same way, once in every process that builds the LeRobot adapter
(the driver, a shard, a tune probe, a Ray actor, an env worker holding the policy: forkserver
and spawn children import nothing from their parent).

A plugin may also change LeRobot itself when it is imported (`lerobot-policy-proprio`
replaces `lerobot.policies.factory.get_policy_class`): after each plugin's import, an entry
point of `WATCHED` whose code is no longer LeRobot's is recorded with the plugins in
`eval_info.json`'s `versions`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rollbench.config.policy import POLICIES
from rollbench.errors import ConfigError, PolicyError, did_you_mean

log = logging.getLogger(__name__)

#: distributions whose (normalised) name starts so are LeRobot policy plugins (LeRobot's rule;
#: LeRobot itself reads the name as written, so a plugin named `lerobot-policy-x` is found here
#: and not by lerobot-eval)
PLUGIN_PREFIX = "lerobot_policy_"

#: LeRobot entry points a plugin could replace on import: "module:attr" or "module:Class.attr"
#: (a class's own attribute, so a classmethod compares as the function it wraps)
WATCHED = (
    "lerobot.policies.factory:get_policy_class",
    "lerobot.policies.factory:make_policy",
    "lerobot.policies.factory:make_pre_post_processors",
    "lerobot.configs.policies:PreTrainedConfig.from_pretrained",
    "lerobot.policies.pretrained:PreTrainedPolicy.from_pretrained",
    "lerobot.processor.pipeline:DataProcessorPipeline.from_pretrained",
    "lerobot.processor.pipeline:DataProcessorPipeline.__call__",
    "lerobot.envs.utils:preprocess_observation",
)


#: LeRobot's package of policy types, imported lazily (`defer_policies_init`)
POLICIES_PACKAGE = "lerobot.policies"
_deferred = threading.RLock()


def defer_policies_init() -> None:
    """Make `lerobot.policies` a package whose `__init__` runs when a name of it is first read.

    That `__init__` imports every policy type's configuration (GR00T's imports torchvision and
    transformers: ~1.5 s of a 4 s import here), while `lerobot.policies.act.configuration_act`
    needs only its own. Submodules import as usual (the package has its `__path__`); the
    first `from lerobot.policies import X`, or `getattr`, runs the real `__init__`, so code
    that reads the package later sees it whole. Nothing happens when it is imported already.
    """
    with _deferred:
        if POLICIES_PACKAGE in sys.modules:
            return
        spec = importlib.util.find_spec(POLICIES_PACKAGE)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return  # the plain import below then says what is missing
        module = importlib.util.module_from_spec(spec)
        loader = spec.loader

        def complete(name: str) -> Any:
            if name.startswith("__") and name != "__all__":  # probes (__wrapped__, __file__ of a namespace) do
                raise AttributeError(name)  # not complete it; `__all__`, what a reader of the whole package reads, does
            with _deferred:
                if module.__dict__.get("__getattr__") is complete:
                    del module.__dict__["__getattr__"]
                    loader.exec_module(module)
            try:
                return module.__dict__[name]
            except KeyError:
                raise AttributeError(f"module {POLICIES_PACKAGE!r} has no attribute {name!r}") from None

        module.__dict__["__getattr__"] = complete
        sys.modules[POLICIES_PACKAGE] = module
        import lerobot  # optional: lerobot

        lerobot.policies = module  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Plugins:
    """What importing the installed policy plugins did in this process."""

    imported: dict[str, str] = field(default_factory=dict)  # module -> its distribution's version
    failed: dict[str, str] = field(default_factory=dict)  # module -> why
    patched: dict[str, str] = field(default_factory=dict)  # watched entry point -> the module that replaced it

    def versions(self) -> dict[str, str]:
        """For `eval_info.json`'s `versions`: each plugin's version, and each replaced entry point."""
        out = dict(self.imported)
        out.update({point: f"replaced by {module} {self.imported.get(module, '')}".rstrip()
                    for point, module in self.patched.items()})
        return out


def _plugins() -> Iterator[tuple[str, metadata.Distribution]]:
    """(module, distribution) of each installed `lerobot_policy_*` distribution (no import)."""
    for dist in metadata.distributions():
        module = str(dist.metadata["Name"] or "").replace("-", "_")
        if module.startswith(PLUGIN_PREFIX):
            yield module, dist


def plugin_distributions() -> dict[str, str]:
    """{module: version} of the installed `lerobot_policy_*` distributions (no import)."""
    found: dict[str, str] = {}
    for module, dist in _plugins():
        found.setdefault(module, str(dist.version))
    return found


def _replaced() -> set[str]:
    """The watched entry points, in the modules imported so far, whose code is not LeRobot's own
    (a wrapper made with `functools.wraps` keeps LeRobot's name, not its code). Modules are not
    imported here: importing `lerobot.policies.factory` would import every policy type."""
    import lerobot  # optional: lerobot

    home = os.path.dirname(os.path.abspath(lerobot.__file__)) + os.sep
    out = set()
    for point in WATCHED:
        module_name, _, path = point.partition(":")
        obj: Any = sys.modules.get(module_name)
        *owners, name = path.split(".")
        for owner in owners:
            obj = getattr(obj, owner, None)
        value = vars(obj).get(name) if isinstance(obj, type) else getattr(obj, name, None)
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None and not os.path.abspath(code.co_filename).startswith(home):
            out.add(point)
    return out


@functools.cache
def discover() -> Plugins:
    """Import every installed policy plugin (once per process), as LeRobot does; a plugin that
    fails to import is logged and skipped (it must not hide the others)."""
    dists = plugin_distributions()
    if not dists:
        return Plugins()
    defer_policies_init()  # a plugin that imports one policy type's modules does not import them all
    plugins = Plugins()
    seen = _replaced()
    for module, version in sorted(dists.items()):
        try:
            importlib.import_module(module)
        except Exception as err:
            plugins.failed[module] = f"{type(err).__name__}: {err}"
            log.warning("LeRobot policy plugin %s failed to import (%s)", module, plugins.failed[module])
            continue
        plugins.imported[module] = version
        for point in sorted(_replaced() - seen):
            plugins.patched[point] = module
            log.warning("LeRobot policy plugin %s replaced LeRobot's %s on import", module, point.replace(":", "."))
        seen |= set(plugins.patched)
    return plugins


def lerobot_versions() -> dict[str, str]:
    """LeRobot's version, each imported policy plugin's, and each entry point a plugin replaced."""
    try:
        out = {"lerobot": metadata.version("lerobot")}
    except metadata.PackageNotFoundError:
        return {}
    return {**out, **discover().versions()}


def lerobot_types() -> list[str]:
    """Every policy type LeRobot knows here: its own and the plugins'."""
    from lerobot.configs.policies import PreTrainedConfig  # optional: lerobot

    discover()
    import lerobot.policies as policies  # optional: lerobot

    getattr(policies, "__all__", None)  # a deferred package (policies/lerobot.py) runs its __init__ now
    return sorted(PreTrainedConfig.get_known_choices())


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
        for _, dist in _plugins():
            for file in dist.files or []:
                if file.suffix == ".py":
                    found = set(_REGISTERS.findall(Path(str(dist.locate_file(file))).read_text(encoding="utf-8", errors="replace")))
                    imported |= found
                    everywhere |= found
    except OSError:
        return None
    return (imported or everywhere), everywhere


def check_action(action: Any, ptype: str, rows: int, width: int | None) -> Any:
    """`select_action`'s output, refused in one line unless it is LeRobot's: one tensor of
    (rows, action dim). A plugin whose interface differs (RewACT returns (action, reward))
    would otherwise fail somewhere later with a message about something else."""
    import torch  # heavy, optional: torch (comes with lerobot)

    shape = f"({rows}, {width})" if width else f"({rows}, action dim)"
    if isinstance(action, torch.Tensor) and action.ndim == 2 and action.shape[0] == rows:
        return action
    if isinstance(action, (tuple, list)):
        parts = ", ".join(_describe(a) for a in action)
        got = f"a {type(action).__name__} of {len(action)} ({parts})"
    else:
        got = _describe(action)
    raise PolicyError(f"{ptype!r} policy's select_action returned {got}, expected a tensor of shape {shape} "
                      f"(LeRobot's interface); rollbench cannot evaluate this policy type")


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    return type(value).__name__
