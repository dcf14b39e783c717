"""Stored probes: `--workers=auto` reuses a probe of the same machine, benchmark and policy.

    <rollbench's cache folder>/probes/<key>.json    (caches.cache_root(): $ROLLBENCH_CACHE, else
                                                    $XDG_CACHE_HOME/rollbench, else ~/.cache/rollbench)

The key names what the probe's figures depend on: the machine (hostname, CPUs this
process may use, CPU model, GPU names), the benchmark (its whole config: type, tasks,
observation settings), whether and at what size videos are rendered, and the policy (its
config, and the modification time of a checkpoint path). Versions (rollbench, Python,
numpy, gymnasium, the simulator's packages, torch) are stored beside the probe: a probe
measured with other versions is measured again, and the file replaced. The run's size
(episodes, workers) is not part of the key: a stored probe is applied to this run's
amount of work, as `--tune.load` is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import socket
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rollbench.caches import cache_root
from rollbench.config.run import RunConfig
from rollbench.results.eval_info import versions as run_versions
from rollbench.results.store import write_json_atomic
from rollbench.scheduler.common import cpu_count
from rollbench.tune.figures import SCHEMA, GpuInfo, Probe

log = logging.getLogger(__name__)

#: bump when a stored probe's meaning changes in a way versions do not show
CACHE_SCHEMA = 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_identity(gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> dict[str, Any]:
    return {"host": socket.gethostname(), "cores": cpu_count(), "cpu": cpu_model(), "gpus": [g.name for g in gpus]}


def _path_stamp(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """What in the run's config the probe's figures depend on (not its size)."""
    data = cfg.to_dict()  # secrets redacted
    policy = dict(data["policy"])
    policy.pop("max_batch_size", None)  # rows per call: the model chooses it, the probe does not depend on it
    return {
        "env": data["env"],
        "policy": policy,
        "policy_path_mtime_ns": _path_stamp(cfg.policy.path or ""),
        "videos": cfg.eval.max_episodes_rendered > 0,
        "video_size": cfg.eval.video_size,
        "render_device": cfg.render_device,
        "mode": cfg.eval.mode,
    }


def versions(cfg: RunConfig) -> dict[str, str]:
    out = dict(run_versions(cfg))
    try:
        out["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pass
    out["probe_schema"] = f"{SCHEMA}.{CACHE_SCHEMA}"
    return out


def key_of(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Lookup:
    """A stored probe that fits (`probe` set), or why none does (`why`)."""

    path: Path
    probe: Probe | None = None
    measured_at: float = 0.0
    why: str = ""

    def age(self) -> str:
        s = max(0.0, time.time() - self.measured_at)
        return f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")


def entry_path(cfg: RunConfig, gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> tuple[Path, dict[str, Any]]:
    identity = {"machine": machine_identity(gpus), "run": run_identity(cfg)}
    return cache_root() / "probes" / f"{key_of(identity)}.json", identity


def lookup(cfg: RunConfig, gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> Lookup:
    path, identity = entry_path(cfg, gpus)
    if not path.is_file():
        return Lookup(path, why="no stored probe of this machine, benchmark and policy")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("cache_schema") != CACHE_SCHEMA or data.get("identity") != json.loads(json.dumps(identity, default=str)):
            return Lookup(path, why="the stored probe is of another kind")
        stored, now = data["versions"], versions(cfg)
        changed = sorted(k for k in {*stored, *now} if stored.get(k) != now.get(k))
        if changed:
            what = ", ".join(f"{k} {stored.get(k, '-')} -> {now.get(k, '-')}" for k in changed)
            return Lookup(path, why=f"the stored probe was measured with other versions ({what})")
        return Lookup(path, Probe.from_dict(data["probe"]), float(data["measured_at"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        return Lookup(path, why=f"the stored probe could not be read ({type(err).__name__}: {err})")


def store(cfg: RunConfig, probe: Probe) -> Path | None:
    """Store `probe` for later `--workers=auto` runs; None (and a debug line) if it cannot be."""
    path, identity = entry_path(cfg, probe.machine.gpus)
    data = {
        "cache_schema": CACHE_SCHEMA, "identity": identity, "versions": versions(cfg), "measured_at": time.time(),
        "probe": probe.to_dict(),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, json.loads(json.dumps(data, default=str)))
    except OSError as err:  # a read-only home must not fail the run
        log.debug("could not store the probe in %s: %s", path, err)
        return None
    return path


def shown(path: Path) -> str:
    """`path` with the home directory as ~."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if home and text.startswith(home + os.sep) else text
