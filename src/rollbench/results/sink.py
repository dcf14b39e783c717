"""Where a run's records become durable: the one seam between an executor's records and the
drive's loop (`drive.drive`), chosen by the executor (`Executor.sink`).

    put(rec)   a record the executor finished ──▶ the records ready to be logged now (this
               one, or earlier ones whose dataset parts are now on disk)
    flush()    the rest, once the executor is done (waits for the last parts)
    log(rec)   make it count: fsync'ed to this process's episode log, or nothing where the
               executor's own processes logged it
    close()    free the writer and its thread, whatever happened

`DurableLog` is every executor's but the shard launcher's: `episodes/<writer>.jsonl`, and
with --eval.recording its part writer first (a logged episode always has its frames).
`Logged` is the launcher's: its children logged their records; it only counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from rollbench.results.dataset import PartWriter
from rollbench.results.log import EpisodeLog
from rollbench.results.records import EpisodeRecord


class RecordSink(Protocol):
    def put(self, rec: EpisodeRecord) -> Iterator[EpisodeRecord]: ...

    def flush(self) -> Iterator[EpisodeRecord]: ...

    def log(self, rec: EpisodeRecord) -> None: ...

    def close(self) -> None: ...


class DurableLog:
    """This process's episode log, and a recording's part writer before it."""

    def __init__(self, output_dir: Path, writer: str, parts: PartWriter | None) -> None:
        self.parts = parts
        try:
            self.episodes = EpisodeLog(output_dir, writer)
        except BaseException:
            if parts is not None:
                parts.close()
            raise

    def put(self, rec: EpisodeRecord) -> Iterator[EpisodeRecord]:
        if self.parts is not None and rec.frames is not None:
            self.parts.submit(rec)  # logged once its frames are on disk
        else:
            yield rec
        if self.parts is not None:
            yield from self.parts.ready()

    def flush(self) -> Iterator[EpisodeRecord]:
        if self.parts is not None:
            yield from self.parts.ready(wait=True)

    def log(self, rec: EpisodeRecord) -> None:
        self.episodes.append(rec)  # fsync'ed: from here on it counts

    def close(self) -> None:
        try:
            if self.parts is not None:
                self.parts.close()
        finally:
            self.episodes.close()


class Logged:
    """Records another process logged already (a shard launcher's children): counted only."""

    def put(self, rec: EpisodeRecord) -> Iterator[EpisodeRecord]:
        yield rec

    def flush(self) -> Iterator[EpisodeRecord]:
        return iter(())

    def log(self, rec: EpisodeRecord) -> None:
        pass

    def close(self) -> None:
        pass
