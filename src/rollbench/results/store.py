"""The output directory: its run manifest (for resume checks) and its eval_info.json."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError
from rollbench.results import owners
from rollbench.results.log import EPISODES_DIR, log_files, writer_process
from rollbench.results.owners import Claim, Writer, diff, pid_alive

MANIFEST = "run.json"
#: --eval.* fields of an adaptive run's stop rule: no part of its identity, but `merge` reads them
STOP_RULE_FIELDS = ("ci_width", "ci_block", "versus", "versus_alpha", "versus_margin", "versus_design")
EVAL_INFO = "eval_info.json"


#: a run whose episode log has not grown for this long is taken to be gone (a writer on another
#: machine, whose process cannot be asked; or a pid reused after a crash)
QUIET_S = 600.0
#: a run that wrote its run.json but no episode log yet (its policy is loading) counts this long
STARTING_S = 120.0


def is_running(output_dir: Path) -> bool:
    """Whether a run still writes episodes into `output_dir`: one that claimed it holds its
    owner file's lock (`owners`). A directory written before owner files existed: some writer of its
    episode log (`episodes/shard<i>of<n>-<host>-<pid>.jsonl`) wrote in the last `QUIET_S`
    and, on this machine, its process is alive; or, before any log exists, its run.json is
    younger than `STARTING_S`. A wrong "yes" costs a wait of at most `QUIET_S`; a wrong "no"
    only lets a comparison's run go ahead of it (`stopping/versus.py`)."""
    if (output_dir / owners.OWNERS_DIR).is_dir():  # its writers hold locks: ask them
        return owners.any_live(output_dir)
    now = time.time()
    files = log_files(output_dir)
    for path in files:
        try:
            if now - path.stat().st_mtime > QUIET_S:
                continue
        except OSError:
            continue
        here, pid = writer_process(path)
        if not here or pid is None or pid_alive(pid):
            return True
    if files:
        return False
    try:
        return now - (output_dir / MANIFEST).stat().st_mtime < STARTING_S
    except OSError:
        return False


def sweep_partial_videos(output_dir: Path) -> int:
    """Remove the half-written videos (`.<name>.<pid>.tmp.mp4`) of writers that are gone:
    a killed worker leaves its episode's file behind; the episode runs again and is filmed
    anew. The number removed."""
    removed = 0
    for path in (output_dir / "videos").glob("*/.*.tmp.mp4"):
        pid = path.name.rsplit(".", 3)[-3]
        if pid.isdigit() and not pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` via a temporary name in the same directory, fsync'ed: a reader never sees
    half a file."""
    # host and pid: shards on several machines may write into one shared directory; open(), not
    # mkstemp: the file gets the umask's permissions (mkstemp's are owner-only)
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: no half-written temporary file stays behind
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _moved_commit_hint(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A hub checkpoint whose branch moved since the run began: how to finish the run."""
    was = (old.get("policy") or {}).get("commit")
    now = (new.get("policy") or {}).get("commit")
    if not was or was == now:
        return ""
    return (f"The checkpoint's hub revision now resolves to another commit; --policy.revision={was} finishes this "
            f"run with the checkpoint it began with. ")


def prepare(output_dir: Path, config: dict[str, Any], writer: Writer) -> tuple[bool, Claim]:
    """Make `output_dir` ready and claim it for `writer` (`owners`); True when it continues an
    earlier run. The claim is held until released (the end of the run) or the process dies.

    A directory that another live run writes into is refused (`owners.claim`). A directory
    that holds a run with a different identity (benchmark, tasks, policy, seed, episodes) is
    refused with the differences listed, unless resume is off, in which case the old episodes
    are set aside (renamed, never deleted) and the run starts over.
    """
    output_dir.mkdir(parents=True, exist_ok=True)  # checked before any work (lifecycle.check_outputs)
    with owners.section(output_dir):  # the check and the write of run.json, one run at a time
        claim = owners.claim(output_dir, writer)
        try:
            return _prepare(output_dir, writer.identity, config, writer.resume), claim
        except BaseException:
            claim.release()
            raise


def _prepare(output_dir: Path, identity: dict[str, Any], config: dict[str, Any], resume: bool) -> bool:
    manifest = output_dir / MANIFEST
    episodes = output_dir / EPISODES_DIR
    continuing = False
    stop_rule_changed = False
    if manifest.exists() and resume:
        try:
            stored = json.loads(manifest.read_text())
            old = stored["identity"]
        except (OSError, ValueError, KeyError) as err:
            raise ConfigError(f"--output_dir={str(output_dir)!r}: cannot read {MANIFEST} ({err}); use a fresh directory or --resume=false") from None
        diffs = diff(old, identity, was="in the log", now="now")
        if diffs:
            raise ConfigError(
                f"--output_dir={str(output_dir)!r} holds a different run; refusing to mix results ("
                + "; ".join(diffs)
                + f"). {_moved_commit_hint(old, identity)}Use another --output_dir, or --resume=false to start over."
            )
        continuing = True
        # the stop rule is no part of the identity (it changes no episode), but `merge` reads it from here
        before = (stored.get("config") or {}).get("eval") or {}
        stop_rule_changed = any(before.get(k) != (config.get("eval") or {}).get(k) for k in STOP_RULE_FIELDS)
    elif not resume and episodes.exists():
        episodes.rename(output_dir / f".episodes-discarded-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    if not continuing or not manifest.exists() or stop_rule_changed:
        write_json_atomic(manifest, {"identity": identity, "config": config})
    return continuing


def read_manifest(root: Path) -> dict[str, Any]:
    """The `config` of the run whose logs lie under `root` (`rollbench merge`): every
    `run.json` under it (shards written on several machines) must describe the same run."""
    if not root.is_dir():
        raise ConfigError(f"rollbench merge {str(root)!r}: not a directory")
    manifests = sorted({*root.glob(MANIFEST), *root.glob(f"**/{MANIFEST}")})
    if not manifests:
        raise ConfigError(f"rollbench merge {str(root)!r}: no {MANIFEST} found under it; is it a rollbench output_dir?")
    loaded = []
    for path in manifests:
        try:
            loaded.append((path, json.loads(path.read_text())))
        except (OSError, ValueError) as err:
            raise ConfigError(f"rollbench merge: cannot read {path} ({err})") from None
    first_path, first = loaded[0]
    for path, other in loaded[1:]:
        if other["identity"] != first["identity"]:
            raise ConfigError(f"rollbench merge: {path} and {first_path} describe different runs; merge them separately")
    config: dict[str, Any] = first["config"]
    return config
