"""The durable episode log: one JSON line per finished episode, fsync'ed before it counts.

Every writer process appends to its own file, `episodes/<writer>.jsonl`, so concurrent
shards (also on a shared network filesystem) never interleave their writes. A crash in
the middle of a write leaves at most a torn last line, which readers skip with a warning.
A write or fsync that fails (a full disk) takes its partial line back out of the file, so
the log holds exactly the records fsync'ed before it, and raises; the run stops there and
a rerun resumes after them.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

from rollbench.results.records import EpisodeRecord

log = logging.getLogger(__name__)

EPISODES_DIR = "episodes"


def _host() -> str:
    return socket.gethostname().split(".")[0] or "host"


def writer_name(shard_id: int, num_shards: int) -> str:
    """Unique per process: a rerun of a shard never appends to a live writer's file."""
    return f"shard{shard_id}of{num_shards}-{_host()}-{os.getpid()}"


def writer_process(log_path: Path) -> tuple[bool, int | None]:
    """Of an episode log `<writer_name>.jsonl`: whether its writer ran on this machine, and its pid."""
    where, _, pid = log_path.stem.partition("-")[2].rpartition("-")
    return where == _host(), int(pid) if pid.isdigit() else None


def _write(fd: int, data: bytes | memoryview) -> int:
    """One write(2); the seam where tests inject a full disk."""
    return os.write(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    # a write on a nearly full disk may write part of the line and return; the rest then fails
    view = memoryview(data)
    while view:
        view = view[_write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # not every platform opens directories
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class EpisodeLog:
    """Append-only writer for one process: a record is one write(2) of a whole line, then
    fsync; it counts once `append` returns."""

    def __init__(self, output_dir: str | Path, writer: str) -> None:
        self.dir = Path(output_dir) / EPISODES_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{writer}.jsonl"
        new = not self.path.exists()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if new:
            _fsync_dir(self.dir)  # the new file's name must survive a power cut along with its records
        # A reused pid (containers restart with the same ones) reopens a file whose last
        # line a crash tore; end that fragment first, or the next record would be glued
        # onto it and lost on read.
        if os.fstat(self._fd).st_size > 0:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
            if torn:
                self._append_durably(b"\n")

    def append(self, record: EpisodeRecord) -> None:
        """Write `record` and fsync it; on failure (OSError, e.g. ENOSPC: see `errors.is_disk_full`)
        the file is left as it was before the call and the error, naming it, is raised."""
        self._append_durably((json.dumps(record.to_json(), allow_nan=False) + "\n").encode("utf-8"))

    def _append_durably(self, data: bytes) -> None:
        assert self._fd is not None, "append after close"
        start = os.fstat(self._fd).st_size  # O_APPEND: this writer's bytes go here
        try:
            _write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError as err:
            try:
                # what did not reach the disk whole must not count, nor glue onto the next line;
                # shrinking a file needs no space. If even this fails, readers skip the torn line.
                os.ftruncate(self._fd, start)
            except OSError:
                log.warning("%s: could not remove a partly written line after %s", self.path, err.strerror)
            raise OSError(err.errno, err.strerror, str(self.path)) from err

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> EpisodeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def log_files(root: str | Path, recursive: bool = False) -> list[Path]:
    root = Path(root)
    pattern = f"**/{EPISODES_DIR}/*.jsonl" if recursive else f"{EPISODES_DIR}/*.jsonl"
    return sorted(root.glob(pattern))


def read_file(path: Path) -> list[EpisodeRecord]:
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    # the text after the last newline is a torn write unless empty
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            data["writer"] = path.stem
            records.append(EpisodeRecord.from_json(data))
        except (json.JSONDecodeError, TypeError) as err:
            where = "torn last line" if lineno >= len(lines) - 1 else f"bad line {lineno}"
            log.warning("%s: skipping %s (%s)", path, where, err)
    return records


def read_records(root: str | Path, recursive: bool = False) -> list[EpisodeRecord]:
    """Every record under `root` (its `episodes/`, or every `episodes/` below it)."""
    out: list[EpisodeRecord] = []
    for path in log_files(root, recursive):
        out.extend(read_file(path))
    return out


class LogTail:
    """Reads the complete new lines of every episode log since the last call."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.offsets: dict[Path, int] = {}

    def skip_existing(self) -> None:
        for path in log_files(self.output_dir):
            self.offsets[path] = path.stat().st_size

    def new_records(self) -> list[EpisodeRecord]:
        out = []
        for path in log_files(self.output_dir):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    chunk = fh.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
            self.offsets[path] = start + end
            for line in chunk[:end].split(b"\n"):
                try:
                    out.append(EpisodeRecord.from_json(json.loads(line)))
                except (ValueError, TypeError):
                    continue  # blank, or a torn line from an earlier crash
        return out
