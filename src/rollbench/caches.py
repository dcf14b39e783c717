"""Where rollbench keeps what outlives a run outside `--output_dir`: one cache folder,
`$ROLLBENCH_CACHE`, else `$XDG_CACHE_HOME/rollbench`, else `~/.cache/rollbench`
(docs/architecture.md, "Where rollbench writes", lists every place a run writes)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """rollbench's cache folder (not created here)."""
    given = os.environ.get("ROLLBENCH_CACHE")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rollbench"


def keep_matplotlib_in_cache() -> None:
    """Point matplotlib's config and font cache (`fontlist-*.json`, built at its first import,
    ~1 s) at `<cache_root>/matplotlib` instead of `~/.config/matplotlib` and `~/.cache/matplotlib`:
    call before matplotlib is imported. A user's MPLCONFIGDIR is kept. matplotlib makes the
    folder at its import, and takes a temporary one where it cannot (a read-only home)."""
    if not os.environ.get("MPLCONFIGDIR"):  # matplotlib takes an empty one as unset
        os.environ["MPLCONFIGDIR"] = str(cache_root() / "matplotlib")
