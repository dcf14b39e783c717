"""Episode records, the durable log, merge and summary."""

from rollbench.results.log import EpisodeLog, read_records
from rollbench.results.records import EpisodeRecord

__all__ = ["EpisodeLog", "EpisodeRecord", "read_records"]
