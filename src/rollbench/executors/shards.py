"""Local shard launcher: `--eval.num_shards=N --launch=local` (being built)."""

from __future__ import annotations

from rollbench.config.run import RunConfig


def launch_local(cfg: RunConfig, flags: dict[str, str]) -> int:
    raise NotImplementedError("--launch=local is not built yet; run shards by hand with --eval.shard_id=K")
