"""Runs and eval_info files shared by tests/test_report.py and tests/test_compare.py."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import run_subprocess

MT10_EPISODES = 10
_RUNS: dict[tuple[str, int, int], Path] = {}


def mt10(factory: pytest.TempPathFactory, policy: str, seed: int = 1000, rendered: int = 0) -> Path:
    """A real `rollbench eval` of MetaWorld MT10, 10 episodes per task; once per session."""
    pytest.importorskip("metaworld")
    key = (policy, seed, rendered)
    if key not in _RUNS:
        out = factory.mktemp(f"mt10-{policy}-{seed}-{rendered}")
        res = run_subprocess(
            "eval", "--env.type=metaworld", "--env.task=mt10", f"--policy.type={policy}",
            f"--eval.n_episodes={MT10_EPISODES}", f"--eval.max_episodes_rendered={rendered}", f"--seed={seed}",
            "--eval.report=true", f"--output_dir={out}",
        )
        assert res.rc == 0, res.err[-3000:]
        _RUNS[key] = out
    return _RUNS[key]


def task(name: str, successes: Sequence[bool], seeds: Sequence[int] | None = None,
         n_steps: Sequence[int] | None = None, group: str = "suite", task_id: int = 0) -> dict[str, Any]:
    """One per_task entry; without seeds it is what lerobot-eval writes."""
    metrics: dict[str, Any] = {
        "sum_rewards": [float(s) for s in successes], "max_rewards": [float(s) for s in successes],
        "successes": list(successes), "video_paths": [],
    }
    entry: dict[str, Any] = {"task_group": group, "task_id": task_id, "metrics": metrics}
    if seeds is not None:  # what rollbench adds
        metrics.update(seeds=list(seeds), episode_ix=list(range(len(successes))))
        entry["task"] = name
    if n_steps is not None:
        metrics["n_steps"] = list(n_steps)
    return entry


def write_info(path: Path, tasks: list[dict[str, Any]], **extra: Any) -> Path:
    """An eval_info.json in the directory `path`; `extra` adds top-level keys (config, versions)."""
    path.mkdir(parents=True, exist_ok=True)
    n = sum(len(t["metrics"]["successes"]) for t in tasks)
    k = sum(sum(t["metrics"]["successes"]) for t in tasks)
    info = {"per_task": tasks, "per_group": {}, "overall": {"pc_success": 100 * k / max(1, n), "n_episodes": n, "eval_s": 1.0}}
    (path / "eval_info.json").write_text(json.dumps({**info, **extra}))
    return path


def outcomes(n_both: int, n_only_a: int, n_only_b: int, n_neither: int) -> tuple[list[bool], list[bool]]:
    """Per-episode successes of A and B for a paired table, episodes in that order."""
    a = [True] * n_both + [True] * n_only_a + [False] * n_only_b + [False] * n_neither
    b = [True] * n_both + [False] * n_only_a + [True] * n_only_b + [False] * n_neither
    return a, b


_ATTR = re.compile(r"""\b(?:src|href|xlink:href|poster|data)\s*=\s*["']([^"']*)["']""", re.I)


def resource_refs(html: str) -> list[str]:
    """Every URL the page names in an attribute, and in CSS url(...)."""
    return _ATTR.findall(html) + re.findall(r"url\(\s*['\"]?([^'\")]+)", html)


def offline_problems(html: str) -> list[str]:
    """What would make a page fetch from the network or run code: empty for a good page."""
    problems = [f"external reference {u!r}" for u in resource_refs(html)
                if re.match(r"^\s*(?:[a-z][a-z0-9+.-]*:|//)", u, re.I) and not u.startswith("#")]
    if re.search(r"<script\b", html, re.I):
        problems.append("a <script> element")
    if re.search(r"@import|<link\b", html, re.I):
        problems.append("a stylesheet link or @import")
    return problems
