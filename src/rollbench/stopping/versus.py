"""`--eval.versus=DIR`: stop each task once a sequential comparison against another run decides.

    this run's records ──▶ Stops ──▶ VersusRule.decide(task): pairs (same task, same seed) of
    DIR's log (read as it grows) ──┘     both runs' whole prefixes ──▶ sequential_test at alpha/T
                                         ──▶ better / worse / equivalent at the first deciding look

The decision is `report.sequential`'s test on the longest prefix of episode indices both runs
have finished, so it is a function of the two runs' episodes alone: the same wherever and
however either run ran, and the same in both runs when each names the other (the test is
symmetric: B better than A is A worse than B). Two runs started together, each with
`--eval.versus=` the other's directory, both stop at the decision; a run compared against a
finished one (a baseline) stops as soon as the baseline's episodes decide it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError
from rollbench.results.log import LogTail
from rollbench.results.records import EpisodeRecord
from rollbench.results.store import MANIFEST, is_running
from rollbench.stopping import sequential
from rollbench.stopping.adaptive import Outcomes, TaskKey, TaskStop

log = logging.getLogger(__name__)


class VersusRule:
    def __init__(self, other: Path, identity: Mapping[str, Any], alpha: float, margin: float, block: int,
                 max_episodes: int, n_tasks: int, here: Path | None = None,
                 design: sequential.Design = "anytime") -> None:
        self.other_dir = other
        self.alpha, self.margin, self.block, self.n_tasks = alpha, margin, block, n_tasks
        self.design = design
        self._max = max_episodes
        theirs = _check_other(other, identity)
        self.other_max = int(theirs["identity"]["n_episodes"])
        self.other: dict[TaskKey, dict[int, bool | None]] = defaultdict(dict)
        self._prefix: dict[TaskKey, int] = defaultdict(int)  # the other run's finished prefix, per task
        self._changed: set[TaskKey] = set()
        self._lock = threading.Lock()  # `ready` is asked from lockstep's task threads too
        self._read_at = self._live_at = float("-inf")
        self._live = True
        test = {"versus_alpha": alpha, "versus_margin": margin, "ci_block": block, "versus_design": design}
        self.paces = here is not None and _runs_to_its_stop(theirs.get("config") or {}, here, test)
        self._held = False
        self.tail = LogTail(other)
        self.refresh()

    @property
    def max_episodes(self) -> int:
        return self._max

    def position(self, episode_index: int) -> int:
        return episode_index  # pairs in episode order (with --seeds: seed by seed)

    def key(self, task_group: str, task_id: int, condition: str) -> TaskKey:
        return (task_group, task_id)  # not with --eval.perturb (config/eval.py)

    def linked(self, key: TaskKey) -> list[TaskKey]:
        return []

    def to_json(self) -> dict[str, Any]:
        out = {"versus": str(self.other_dir), "alpha": self.alpha, "margin": self.margin, "block": self.block,
               "max_episodes": self._max}
        if self.design != "anytime":
            out["design"] = self.design
        return out

    def refresh(self) -> list[TaskKey]:
        """Read what the other run logged since the last call; the tasks it changed (also
        those a `ready` call read in between)."""
        with self._lock:
            self._read()
            changed, self._changed = self._changed, set()
        return sorted(changed)

    def _read(self) -> None:
        self._read_at = time.monotonic()
        for rec in self.tail.new_records():
            self._changed.add(self._take(rec))

    def _take(self, rec: EpisodeRecord) -> TaskKey:
        key = (rec.task_group, rec.task_id)
        have = self.other[key]
        if rec.ok or have.get(rec.episode_index) is None:
            have[rec.episode_index] = rec.success if rec.ok else None
        while self._prefix[key] in have:
            self._prefix[key] += 1
        return key

    def ready(self, key: TaskKey, position: int) -> bool:
        """Pacing, when both runs go at once: an episode more than one block (`--eval.ci_block`)
        ahead of the other run's finished prefix of the task waits, while that run is alive
        and heading for its stop. A decision needs both runs' prefixes, so without it the
        faster run would run on past the decision and throw those episodes away; with it, each
        run goes at most a block (plus what is in flight) past the decision."""
        if not self.paces:
            return True
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= READ_EVERY_S:
                self._read()
            if now - self._live_at >= LIVE_EVERY_S:
                self._live_at, self._live = now, is_running(self.other_dir)
            have = self._prefix[key]
            if not self._live or have >= min(self._max, self.other_max) or position < have + self.block:
                return True
            if not self._held:
                self._held = True
                log.info("--eval.versus: episodes more than %d ahead of %s wait for it (pacing; "
                         "they start as it goes on, or when it stops)", self.block, self.other_dir)
            return False

    def decide(self, key: TaskKey, outcomes: Outcomes) -> TaskStop:
        with self._lock:
            a = dict(self.other[key])
        return paired_decision(a, outcomes.get(key, {}), min(self._max, self.other_max), self._max, self.block,
                               self.alpha / self.n_tasks, self.margin, self.design)


def paired_decision(a: Mapping[int, bool | None], b: Mapping[int, bool | None], reach: int, max_episodes: int,
                    block: int, level: float, margin: float, design: sequential.Design,
                    label: str = "versus") -> TaskStop:
    """B's stop by the sequential test of `b` against `a` (position -> success, None for a
    failed unit), paired by position on the longest prefix both have finished, looked at
    every `block` positions and at `reach` (the last position both can have); a decision
    stops B at the prefix of positions its pairs came from, and is reported as that decision
    at the last look too (where it stops B at `max_episodes`, as no decision would: only the
    reason differs). `label`: the details' key."""
    n = 0
    while n < reach and n in a and n in b:
        n += 1
    looked = n - n % block if n < reach else n
    xa, xb, index = [], [], []
    for i in range(looked):
        if a[i] is not None and b[i] is not None:  # a failed unit pairs with nothing
            xa.append(bool(a[i]))
            xb.append(bool(b[i]))
            index.append(i)
    result = _test(tuple(xa), tuple(xb), reach, level, margin, block, design)
    details = {label: {
        "decision": result.decision, "n_pairs": result.n_pairs, "b_wins": result.b_wins,
        "n_discordant": result.n_discordant,
        # the fixed design has no e-value or anytime p-value (NaN): null in eval_info.json
        "e_value": _number(result.e_value), "p_value": _number(result.p_value),
        "interval": list(result.interval), "alpha": result.alpha,
    }}
    if result.stopped_at is not None:
        k = index[result.stopped_at - 1] + 1  # the prefix of positions those pairs came from
        # a decision at the last look is one too (k = max_episodes): the closing line and
        # `stop.reason` say what `stop.versus` says (issue 47)
        return TaskStop(min(k, max_episodes), result.decision, None, looked, details)  # type: ignore[arg-type]
    if looked >= reach:
        return TaskStop(max_episodes, "max_episodes", None, looked, details)
    return TaskStop(None, "running", None, looked, details)


@functools.lru_cache(maxsize=4096)
def _test(xa: tuple[bool, ...], xb: tuple[bool, ...], reach: int, level: float, margin: float, block: int,
          design: sequential.Design) -> sequential.SequentialResult:
    """The test of these pairs, once: a rule asks again after every episode of the key or of a
    linked one (a sweep's control: each of its conditions), and the pairs change once a block."""
    if design == "fixed":  # the budget: every pair the two can have (failed units give none)
        return sequential.fixed_budget_test(xa, xb, max(1, reach), level, block)
    return sequential.sequential_test(xa, xb, level, margin, block)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


#: two runs started together, each against the other: how long one waits for the other's run.json
WAIT_FOR_OTHER_S = 60.0
#: pacing: how often the other run's log is read, and asked whether it still runs (a few stat calls)
READ_EVERY_S = 0.2
LIVE_EVERY_S = 2.0


def _runs_to_its_stop(config: Mapping[str, Any], here: Path, mine: Mapping[str, Any]) -> bool:
    """Whether the other run's prefixes grow until our decision: it runs every episode (no
    stop rule), or it stops on the same comparison against this run (the same test: `mine`,
    this run's --eval.versus_* and --eval.ci_block). Any other rule (its own --eval.ci_width, a
    comparison with a third run or at another level) may stop a task of it early, and this
    run would then wait for episodes that never come: it is not paced against such a run."""
    ev = config.get("eval") or {}
    if ev.get("ci_width") is not None:
        return False
    theirs = ev.get("versus")
    if theirs is None:
        return True
    if any(ev.get(k) != v for k, v in mine.items()):
        return False
    try:
        return Path(theirs).resolve() == here.resolve()
    except OSError:
        return False


def _check_other(other: Path, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The other run's run.json, once it is known to pair with this one."""
    flag = f"--eval.versus={str(other)!r}"
    deadline = time.monotonic() + WAIT_FOR_OTHER_S
    if not (other / MANIFEST).exists():
        log.info("waiting up to %.0f s for the run at %s to start (its %s)", WAIT_FOR_OTHER_S, other, MANIFEST)
    while not (other / MANIFEST).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        manifest = json.loads((other / MANIFEST).read_text())
        theirs = manifest["identity"]
    except FileNotFoundError:
        raise ConfigError(f"{flag}: no {MANIFEST} there after {WAIT_FOR_OTHER_S:.0f} s; name the --output_dir of a "
                          f"rollbench eval run (started, running or finished)") from None
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"{flag}: cannot read {other / MANIFEST} ({err})") from None
    for what in ("env", "seed", "seeds"):
        if theirs.get(what) != identity.get(what):
            raise ConfigError(
                f"{flag} ran with another {'benchmark' if what == 'env' else what} ({theirs.get(what)!r}, here "
                f"{identity.get(what)!r}); a sequential comparison pairs the episodes of the same task and seed"
            )
    if theirs.get("policy") == identity.get("policy"):
        raise ConfigError(f"{flag} ran the same policy; compare two different ones")
    return dict(manifest)


def precheck(cfg: Any) -> None:
    """Before anything is written or waited for: refuse a directory that is no run's (missing, a
    file, a folder of runs) and another run that cannot pair with this one, if it has started.
    Only an existing directory without its run.json yet (a run starting there, e.g. two runs
    started against each other) is waited for, when the run opens."""
    other = Path(cfg.eval.versus)
    flag = f"--eval.versus={cfg.eval.versus!r}"
    if (other / MANIFEST).exists():
        _check_other(other, cfg.identity())
        return
    if not other.exists():
        raise ConfigError(f"{flag}: no such directory; name the --output_dir of a rollbench eval run (finished, or "
                          f"running now: to start two runs against each other, make both output directories first)")
    if not other.is_dir():
        raise ConfigError(f"{flag} is a file; name the --output_dir of a rollbench eval run")
    runs = sorted(p.parent.name for p in other.glob(f"*/{MANIFEST}"))
    if runs:
        raise ConfigError(f"{flag} holds no {MANIFEST} but runs below it ({', '.join(runs[:3])}"
                          f"{', ...' if len(runs) > 3 else ''}); name the --output_dir of one run")


def versus_rule(cfg: Any) -> VersusRule:
    """The rule of `cfg` (a RunConfig with --eval.versus set)."""
    ev = cfg.eval
    n_tasks = sum(len(names) for names in cfg.env.tasks().values())
    return VersusRule(Path(ev.versus), cfg.identity(), ev.versus_alpha, ev.versus_margin, ev.ci_block,
                      ev.n_episodes, n_tasks, Path(cfg.output_dir), ev.versus_design)
