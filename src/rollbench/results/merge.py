"""Merge: one record per planned unit, recomputed from every log, never from averages.

A unit seen twice (a re-run shard, a resumed run) counts once. A finished (`ok`) record
beats a `failed` one; two `ok` records of the same unit with different outcomes are a
conflict: the first written is kept and the conflict is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rollbench.plan import EpisodeUnit, UnitKey
from rollbench.results.log import read_records
from rollbench.results.records import EpisodeRecord


@dataclass
class Merged:
    plan: list[EpisodeUnit]
    records: dict[UnitKey, EpisodeRecord] = field(default_factory=dict)
    duplicates: int = 0
    conflicts: list[tuple[EpisodeRecord, EpisodeRecord]] = field(default_factory=list)
    unplanned: list[EpisodeRecord] = field(default_factory=list)

    @property
    def missing(self) -> list[EpisodeUnit]:
        return [u for u in self.plan if u.key not in self.records]

    @property
    def failed(self) -> list[EpisodeRecord]:
        return [r for r in self.records.values() if not r.ok]

    @property
    def complete(self) -> bool:
        return not self.missing and not self.failed

    def done_keys(self) -> set[UnitKey]:
        """Units that need no rerun: finished ones (failed ones are retried on resume)."""
        return {k for k, r in self.records.items() if r.ok}


def merge(records: Iterable[EpisodeRecord], plan: Sequence[EpisodeUnit]) -> Merged:
    out = Merged(plan=list(plan))
    planned = {u.key: u for u in plan}
    for rec in sorted(records, key=lambda r: (r.finished_at, r.writer)):
        unit = planned.get(rec.key)
        if unit is None or unit.seed != rec.seed or unit.task != rec.task:
            out.unplanned.append(rec)
            continue
        have = out.records.get(rec.key)
        if have is None or (not have.ok and rec.ok):
            out.records[rec.key] = rec
        elif not rec.ok or rec.outcome() == have.outcome():
            out.duplicates += 1
        else:
            out.conflicts.append((have, rec))
    return out


def read_merged(root: Path, plan: Sequence[EpisodeUnit], recursive: bool = False) -> Merged:
    """Every episode log under `root` (`recursive`: in its subfolders too, a merge of shard
    directories) merged against `plan`: the one way the logs are read back."""
    return merge(read_records(root, recursive=recursive), plan)
