"""The durable episode log: one JSON line per finished episode, fsync'ed before it counts.

Every writer process appends to its own file, `episodes/<writer>.jsonl`, so concurrent
shards (also on a shared network filesystem) never interleave their writes. A crash in
the middle of a write leaves at most a torn last line, which readers skip with a warning.
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


def writer_name(shard_id: int, num_shards: int) -> str:
    """Unique per process: a rerun of a shard never appends to a live writer's file."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"shard{shard_id}of{num_shards}-{host}-{os.getpid()}"


class EpisodeLog:
    """Append-only writer for one process."""

    def __init__(self, output_dir: str | Path, writer: str) -> None:
        self.dir = Path(output_dir) / EPISODES_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{writer}.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        # A reused pid (containers restart with the same ones) reopens a file whose last
        # line a crash tore; end that fragment first, or the next record would be glued
        # onto it and lost on read.
        if self._fh.tell() > 0:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
            if torn:
                self._fh.write("\n")

    def append(self, record: EpisodeRecord) -> None:
        self._fh.write(json.dumps(record.to_json(), allow_nan=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

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
