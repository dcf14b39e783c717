"""Paths a user gives for rollbench to write, checked before any work.

Every command that writes where a flag says (eval's --output_dir and
--eval.recording_root, tune's --tune.output, merge's DIR, report's --output, compare's
--html) checks the path here first, by creating and removing a file in the nearest folder
that exists on the way. `os.access` is no check: it tells root that every folder is
writable, /proc included, which takes no new file; the run then failed at its end, after
the work, with a traceback. Nothing is made here: a refused path leaves no folder behind.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

from rollbench.errors import ConfigError


def _nearest_folder(flag: str, value: str, path: Path) -> Path:
    """The nearest folder on the way to `path` (itself included) that exists; a file on the
    way is refused."""
    for folder in (path, *path.parents):
        if folder.is_dir():
            return folder
        if folder.is_symlink() and not folder.exists():
            raise ConfigError(f"{flag}={value!r}: {folder} is a link to {os.readlink(folder)}, which does not exist; "
                              f"remove the link or make its target")
        if folder.exists():
            raise ConfigError(f"{flag}={value!r}: {folder} is a file, not a directory; give a path in a directory you can write")
    return Path(path.anchor)


def _probe(flag: str, value: str, folder: Path) -> None:
    # host and pid: shards on several machines may check one shared directory at once
    probe = folder / f".rollbench-probe-{socket.gethostname()}-{os.getpid()}"
    try:
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"{flag}={value!r}: {folder} takes no new file ({err.strerror or err}); give a path in a "
                          f"directory you can write") from None


def output_dir(flag: str, value: str) -> Path:
    """The directory `flag=value` names, which rollbench makes (with its parents) or writes
    into: refused, in one line naming the flag, the path and the OS's reason, when a file
    is on the way or the nearest existing folder takes no new file."""
    path = Path(value).expanduser().absolute()
    _probe(flag, value, _nearest_folder(flag, value, path))
    return Path(value).expanduser()


def output_file(flag: str, value: str, parents: bool = False) -> Path:
    """The file `flag=value` names: not a directory, in a folder that takes a new file.
    `parents`: its folder may be missing (rollbench makes it), else it must exist."""
    path = Path(value).expanduser()
    if path.is_dir():
        raise ConfigError(f"{flag}={value!r} is a directory; give a file path")
    if not parents and not path.parent.is_dir():
        raise ConfigError(f"{flag}={value!r} is not allowed; it must be a file path in an existing directory")
    _probe(flag, value, _nearest_folder(flag, value, path.absolute().parent))
    return path


def run_folders(flag: str, value: str, names: Iterable[str]) -> None:
    """The folders `names` inside the directory `flag=value` (an earlier run's `episodes/`,
    `videos/`, ...), each probed as the directory itself is: a folder of a finished run that
    takes no new file (read-only, `chattr +i`, a file or a dangling link in its place) is
    refused before any work, not met when the rerun first writes there."""
    root = Path(value).expanduser().absolute()
    for name in names:
        folder = root / name
        if folder.exists() or folder.is_symlink():
            _probe(flag, value, _nearest_folder(flag, value, folder))
