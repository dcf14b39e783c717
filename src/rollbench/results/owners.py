"""Who writes into an output directory now: a run owns its directory while it writes.

    <output_dir>/.rollbench.lock            flock'ed only while a run checks and claims the
                                            directory (run.json's check-then-write included)
    <output_dir>/owners/<host>-<pid>.json   one per live writer: who it is, which run, which
                                            shard; flock'ed by that writer for its whole life

An OS lock dies with its process (SIGKILL included), so an owner file whose lock another process
can take belongs to a writer that is gone; the next claim removes it. Two runs may write into one
directory at once only when they are the same run (equal identities) and split its units: shards
K != K' of one N, or an `--executor=shards` launcher's children. Any other second run is refused in
one line naming the live writer's pid and host, before any work: a different run would mix its
records with the first's; an identical one would run every episode a second time.

On Linux, flock over NFS is a POSIX lock the server keeps, so shards on several machines see
each other's locks. On a filesystem without locks (some FUSE mounts), a writer on another
machine counts as live until its owner file is removed; the refusal names that file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from rollbench.errors import ConfigError

OWNERS_DIR = "owners"
LOCK_FILE = ".rollbench.lock"
#: the longest another run's check-and-claim may hold the directory's lock (it reads and
#: writes run.json, a few ms; a slow network filesystem, seconds)
SECTION_WAIT_S = 60.0


def host() -> str:
    return socket.gethostname().split(".")[0] or "host"


@dataclass(frozen=True)
class Writer:
    """One process that writes a run's episodes into the directory."""

    host: str
    pid: int
    identity: dict[str, Any]
    shard_id: int | None  # None: every shard (one process, or an --executor=shards launcher)
    num_shards: int
    launched_by: int | None  # the --executor=shards launcher whose child this is
    resume: bool
    started: float

    @property
    def who(self) -> str:
        shard = "" if self.shard_id is None or self.num_shards == 1 else f", shard {self.shard_id} of {self.num_shards}"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} on host {self.host}{shard}, since {since}"

    def shares_with(self, other: Writer) -> bool:
        """Whether the two may write into one directory at once: one run, split between them."""
        if self.identity != other.identity:
            return False
        if self.launched_by is not None and other.host == self.host and other.pid == self.launched_by:
            return True  # its launcher (children are started after the launcher's claim)
        if self.host == other.host and self.launched_by is not None and self.launched_by == other.launched_by:
            return True  # siblings: one launcher gave them different shards
        return (self.shard_id is not None and other.shard_id is not None
                and self.num_shards == other.num_shards > 1 and self.shard_id != other.shard_id)


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (also someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock(fh: IO[Any], exclusive: bool) -> bool | None:
    """Try to lock `fh` without waiting: True, False (someone holds it), None (no locks here)."""
    try:
        fcntl.flock(fh, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            return False
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise


@contextmanager
def section(output_dir: Path, wait_s: float = SECTION_WAIT_S) -> Iterator[None]:
    """The directory's lock, held while a run checks and claims it: two runs started together
    take turns, so the second sees the first's claim and its run.json."""
    path = output_dir / LOCK_FILE
    with open(path, "a+") as fh:
        deadline = time.monotonic() + wait_s
        while (got := _lock(fh, exclusive=True)) is False:
            if time.monotonic() > deadline:
                raise ConfigError(f"--output_dir={str(output_dir)!r}: another rollbench process has held {path} for "
                                  f"over {wait_s:.0f} s; is it stuck? Stop it, or use another --output_dir")
            time.sleep(0.05)
        try:
            yield
        finally:
            if got:
                fcntl.flock(fh, fcntl.LOCK_UN)


class Claim:
    """This process's ownership of the directory: its owner file, locked until `release`
    (or until the process dies)."""

    def __init__(self, path: Path, fh: IO[Any]) -> None:
        self.path = path
        self._fh: IO[Any] | None = fh

    def release(self) -> None:
        if self._fh is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # an unremovable file is stale from now on: its lock goes with the close
        self._fh.close()
        self._fh = None


def _read(path: Path) -> Writer | None:
    try:
        data = json.loads(path.read_text())
        return Writer(**data)
    except (OSError, ValueError, TypeError):
        return None


def live_writers(output_dir: Path, clean: bool = False) -> list[tuple[Path, Writer]]:
    """The writers whose owner files are locked now. `clean`: remove the others' files (only
    inside `section`, so that no claim is half made)."""
    folder = output_dir / OWNERS_DIR
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            fh = open(path)  # noqa: SIM115 (closed below; a read lock must not outlive the test)
        except OSError:
            continue
        with fh:
            free = _lock(fh, exclusive=False)
        writer = _read(path)
        if free is None:  # no locks on this filesystem: a process on this machine can be asked
            free = writer is None or (writer.host == host() and not pid_alive(writer.pid))
        if free:
            if clean:
                path.unlink(missing_ok=True)
            continue
        if writer is not None:
            found.append((path, writer))
    return found


def diff(old: Any, new: Any, prefix: str = "", was: str = "there", now: str = "here") -> list[str]:
    """Where two identities differ, a line each: `key: OLD <was>, NEW <now>`."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += diff(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else key, was, now)
        return out
    return [] if old == new else [f"{prefix}: {old!r} {was}, {new!r} {now}"]


def claim(output_dir: Path, me: Writer) -> Claim:
    """Take the directory for `me`, or refuse in one line naming the live writer it would
    mix with. Call inside `section`."""
    flag = f"--output_dir={str(output_dir)!r}"
    for path, other in live_writers(output_dir, clean=True):
        if other.pid == me.pid and other.host == me.host:
            raise ConfigError(f"{flag}: this process already writes a run there ({path}); close it first")
        if not me.shares_with(other):
            if other.identity != me.identity:
                why = "another run with other settings (" + "; ".join(diff(other.identity, me.identity)[:3]) + ")"
            else:
                why = "the same run; both would run every episode"
            raise ConfigError(f"{flag} is being written by {why}: {other.who}. Wait for it to end (then rerun to "
                              f"resume), or use another --output_dir{_no_locks_hint(path)}")
        if not me.resume and me.launched_by is None:
            raise ConfigError(f"{flag}: --resume=false would set aside the episodes that {other.who} is writing there "
                              f"now; wait for it to end, or use another --output_dir")
    folder = output_dir / OWNERS_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"{me.host}-{me.pid}.json"
    fh = open(path, "w")  # noqa: SIM115 (held until Claim.release: the lock is the claim)
    try:
        _lock(fh, exclusive=True)  # a new file in the section: nobody else holds it
        json.dump(asdict(me), fh)
        fh.flush()
        os.fsync(fh.fileno())
    except BaseException:
        fh.close()
        path.unlink(missing_ok=True)
        raise
    return Claim(path, fh)


def _no_locks_hint(path: Path) -> str:
    """On a filesystem without locks a dead writer on another machine cannot be told from a live one."""
    try:
        with open(path) as fh:
            if _lock(fh, exclusive=False) is None:
                return f"; if that process is gone, remove {path}"
    except OSError:
        pass
    return ""


def any_live(output_dir: Path) -> bool:
    """Whether some process owns `output_dir` now (a comparison's other run, say)."""
    return bool(live_writers(output_dir))
