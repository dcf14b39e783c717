"""`rollbench merge DIR`: one eval_info.json from every log and manifest under DIR."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError
from rollbench.results.log import read_records
from rollbench.results.store import EVAL_INFO, MANIFEST


def merge_dir(root: str | Path, config_from_dict: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any], Path]:
    from rollbench.executors.local import build_plan, versions, write_eval_info
    from rollbench.results.merge import merge

    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"rollbench merge {str(root)!r}: not a directory")
    manifests = sorted({*root.glob(MANIFEST), *root.glob(f"**/{MANIFEST}")})
    if not manifests:
        raise ConfigError(f"rollbench merge {str(root)!r}: no {MANIFEST} found under it; is it a rollbench output_dir?")
    loaded = []
    for path in manifests:
        try:
            loaded.append((path, json.loads(path.read_text())))
        except (OSError, ValueError) as err:
            raise ConfigError(f"rollbench merge: cannot read {path} ({err})") from None
    first_path, first = loaded[0]
    for path, other in loaded[1:]:
        if other["identity"] != first["identity"]:
            raise ConfigError(f"rollbench merge: {path} and {first_path} describe different runs; merge them separately")
    cfg = config_from_dict(first["config"])
    plan = build_plan(cfg)
    merged = merge(read_records(root, recursive=True), plan)
    info = write_eval_info(root, merged, cfg, {"config": first["config"], "versions": versions(cfg), "merged_from": len({*map(str, root.glob('**/episodes'))})})
    return info, root / EVAL_INFO
