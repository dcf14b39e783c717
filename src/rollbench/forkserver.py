"""The multiprocessing context of this machine's worker processes, whatever TMPDIR is.

On Linux rollbench starts its workers, tune's probes and async vector envs through a
forkserver (a GL context or torch threads in the driver must not be forked). multiprocessing's
forkserver listens on a Unix socket at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, and a socket's
path holds at most 107 bytes: under a TMPDIR longer than 75 bytes (a job scheduler's
per-job folder, pytest's tmp_path) every run stopped with "OSError: AF_UNIX path too long"
(Python before 3.14 does not check). `context()` makes multiprocessing's folder under the
first of TMPDIR, /tmp, /var/tmp and /dev/shm whose socket path fits, as Python 3.14 does,
and multiprocessing removes it at exit as it removes its own.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.util
import os
import shutil
import sys
import tempfile
from typing import Any

from rollbench.errors import ConfigError

MAX_SOCKET_PATH = 107  # bytes of sockaddr_un.sun_path, less its closing NUL
_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def _fits(folder: str) -> bool:
    return len(os.fsencode(folder)) + _SUFFIX <= MAX_SOCKET_PATH


def socket_folder() -> None:
    """Give multiprocessing a temporary folder whose socket paths fit (once per process)."""
    config: dict[str, Any] = mp.current_process()._config  # type: ignore[attr-defined]
    if config.get("tempdir") is not None:
        return  # multiprocessing made its folder already (or this was called before)
    base = tempfile.gettempdir()
    if _fits(base):
        return  # multiprocessing makes its own there, as always
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        if _fits(folder) and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            try:
                made = tempfile.mkdtemp(prefix="pymp-", dir=folder)
            except OSError:
                continue
            multiprocessing.util.Finalize(None, shutil.rmtree, args=(made,), kwargs={"ignore_errors": True},
                                          exitpriority=-100)
            config["tempdir"] = made
            return
    raise ConfigError(f"TMPDIR={base!r} is too long for the Unix socket of rollbench's worker processes "
                      f"({len(os.fsencode(base))} bytes; at most {MAX_SOCKET_PATH - _SUFFIX}) and none of "
                      f"/tmp, /var/tmp, /dev/shm is writable: set TMPDIR to a shorter folder")


def context() -> Any:
    """forkserver on Linux (its socket folder made to fit), spawn elsewhere."""
    if not sys.platform.startswith("linux"):
        return mp.get_context("spawn")
    socket_folder()
    return mp.get_context("forkserver")
