"""Kill soak: SIGKILL worker processes and whole process groups of `rollbench eval`; every
episode must end up in the log exactly once, with exactly a clean run's results.

    .venv/bin/python bench/soak.py                     # metaworld + pusht, both modes, 10 + 10 kills each
    .venv/bin/python bench/soak.py --kills=3 --workloads=fake --modes=continuous    # a quick look

For every workload and mode:

1. a clean reference run;
2. worker kills: runs whose env worker processes (found by process tree: the multiprocessing
   children of the eval process) are SIGKILLed at random moments, `--kills` in all, with
   `--eval.max_retries` high enough that no kill fails an episode; a run must then finish
   by itself (exit 0);
3. group kills: a run whose whole process group is SIGKILLed at a random moment (start-up,
   stepping, writing results), rerun with the same command, again and again, until a
   rerun completes; `--kills` kills in all, in as many fresh output directories as needed.
   With `--tear`, some kills are followed by cutting the log's last line in half, the torn
   write a crash can leave on some filesystems (a local disk hardly ever tears a line this
   short): the next run must say so and run that episode again.

Every finished directory is compared with the reference, by unit key: lost (no finished
record), duplicated (more than one line), mismatched (`EpisodeRecord.outcome()`: status,
success, rewards, steps, seed), extra; every video eval_info.json lists is decoded (PyAV)
and must have the reference video's frame count. The table goes to stdout, progress to
stderr; the exit code is 1 when anything was lost, duplicated, mismatched, bad or failed.

A worker is only killed once it is `--min-worker-age` seconds old: one that dies over and
over before running anything makes the pool give up by design (`MAX_FRUITLESS_RESTARTS`),
which is not what this measures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbench.plan import UnitKey
from rollbench.results.records import EpisodeRecord

COMMON = ("--eval.report=false", "--eval.max_retries=1000")


@dataclass(frozen=True)
class Workload:
    name: str
    flags: tuple[str, ...]

    def with_episodes(self, n: int) -> Workload:
        """The same workload with `n` episodes per task."""
        kept = tuple(f for f in self.flags if not f.startswith("--eval.n_episodes="))
        return Workload(self.name, (*kept, f"--eval.n_episodes={n}"))


WORKLOADS = {
    "metaworld": Workload("metaworld", (
        "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert", "--eval.n_episodes=150",
        "--eval.max_episodes_rendered=2", "--eval.video_size=128",
    )),
    "pusht": Workload("pusht", (
        "--env.type=pusht", "--env.obs_type=pixels_agent_pos", "--policy.type=random", "--eval.n_episodes=20",
        "--eval.max_episodes_rendered=4",
    )),
    # for the test suite and quick looks: 30 episodes of 20 steps, 10 ms a step
    "fake": Workload("fake", (
        "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=10", "--env.step_sleep_s=0.01",
        "--eval.max_episodes_rendered=2", "--eval.video_size=32",
    )),
}


# -- processes (/proc: Linux, as process groups are) ----------------------------------------
def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name (state is [0], ppid [1], pgid [2])."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def age_s(pid: int) -> float:
    stat = _stat(pid)
    if stat is None:
        return 0.0
    started = int(stat[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time since boot
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in _pids():
        stat = _stat(p)
        if stat is not None and stat[0] != "Z":
            children.setdefault(int(stat[1]), []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def worker_pids(pid: int) -> list[int]:
    """The env worker processes of the eval process `pid`: its multiprocessing children,
    forked by its forkserver (or spawned), not the forkserver or resource tracker themselves."""
    helpers = {p for p in descendants(pid) if "multiprocessing.forkserver" in _cmdline(p) or "multiprocessing.resource_tracker" in _cmdline(p)}
    out = []
    for p in descendants(pid):
        stat = _stat(p)
        parent = int(stat[1]) if stat else -1
        forked = parent in helpers and "multiprocessing.forkserver" in _cmdline(parent)
        if forked or "multiprocessing.spawn" in _cmdline(p):
            out.append(p)
    return out


def group_members(pgid: int) -> list[int]:
    out = []
    for p in _pids():
        stat = _stat(p)
        if stat is not None and stat[0] != "Z" and int(stat[2]) == pgid:
            out.append(p)
    return out


def leftover_buffers(pid: int) -> list[Path]:
    """Shared-memory observation buffers of the eval process `pid` (scheduler/pool.py names
    them rollbench-PID-...): a SIGKILLed run cannot remove them."""
    from rollbench.scheduler.shm import shm_dir

    return sorted(Path(shm_dir()).glob(f"rollbench-{pid}-*"))


# -- the log and the videos -----------------------------------------------------------------
@dataclass
class Scan:
    records: list[EpisodeRecord]
    torn: int  # lines that are not a record (a torn write)


def scan_log(out: Path) -> Scan:
    records, torn = [], 0
    for path in sorted((out / "episodes").glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            try:
                records.append(EpisodeRecord.from_json(json.loads(line)))
            except (ValueError, TypeError):
                torn += 1
    return Scan(records, torn)


def torn_files(out: Path) -> set[Path]:
    """Log files whose last line has no newline: a write torn by a crash."""
    torn = set()
    for path in (out / "episodes").glob("*.jsonl"):
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            torn.add(path)
    return torn


def tear_last_line(out: Path, pid: int) -> Path | None:
    """Cut the last record that process `pid` wrote in half, as a crash in mid-write would."""
    logs = list((out / "episodes").glob(f"*-{pid}.jsonl"))
    if not logs:
        return None
    data = logs[0].read_bytes()
    if not data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if len(data) - start < 4:
        return None
    with open(logs[0], "r+b") as fh:
        fh.truncate(start + (len(data) - start) // 2)
    return logs[0]


def reported(paths: set[Path], stderr: Path) -> set[Path]:
    """The torn files of `paths` that the run whose stderr is `stderr` warned about."""
    text = stderr.read_text(errors="replace")
    return {p for p in paths if f"{p}: skipping torn last line" in text}


def video_frames(path: Path) -> int:
    """Frames decoded from `path` (raises if it is not a whole video)."""
    import av

    container = av.open(str(path))
    try:
        return sum(1 for _ in container.decode(video=0))
    finally:
        container.close()


def listed_videos(out: Path) -> list[str]:
    info = json.loads((out / "eval_info.json").read_text())
    return [p for task in info["per_task"] for p in task["metrics"]["video_paths"]]


@dataclass(frozen=True)
class Reference:
    outcomes: dict[UnitKey, tuple[Any, ...]]
    videos: dict[str, int]  # listed video -> frames
    wall_s: float


@dataclass
class Check:
    """One finished output directory against the reference."""

    compared: int = 0
    lost: int = 0
    duplicated: int = 0
    mismatched: int = 0
    extra: int = 0
    failed_records: int = 0
    videos_checked: int = 0
    videos_bad: int = 0
    videos_missing: int = 0  # filmed in the reference, not listed here (the file never appeared)
    torn_lines: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, other: Check) -> None:
        for name in ("compared", "lost", "duplicated", "mismatched", "extra", "failed_records", "videos_checked",
                     "videos_bad", "videos_missing", "torn_lines"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.examples += other.examples[: max(0, 5 - len(self.examples))]

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.mismatched or self.extra or self.failed_records or self.videos_bad)


def compare(out: Path, ref: Reference) -> Check:
    scan = scan_log(out)
    lines = Counter(r.key for r in scan.records)
    finished: dict[UnitKey, EpisodeRecord] = {}
    for rec in scan.records:
        if rec.ok:
            finished.setdefault(rec.key, rec)
    check = Check(compared=len(ref.outcomes), torn_lines=scan.torn)
    check.failed_records = sum(1 for r in scan.records if not r.ok)
    for key, want in ref.outcomes.items():
        if key not in finished:
            check.lost += 1
            check.examples.append(f"{out}: {key} lost")
        elif finished[key].outcome() != want:
            check.mismatched += 1
            check.examples.append(f"{out}: {key} is {finished[key].outcome()}, the reference {want}")
    check.duplicated = sum(1 for n in lines.values() if n > 1)
    check.extra = sum(1 for k in lines if k not in ref.outcomes)
    check.examples += [f"{out}: {k} logged {n} times" for k, n in lines.items() if n > 1][:3]
    listed = listed_videos(out)
    check.videos_missing = len(set(ref.videos) - set(listed))
    for rel in listed:
        check.videos_checked += 1
        try:
            frames = video_frames(out / rel)
        except Exception as err:  # any failure to decode is a bad video
            check.videos_bad += 1
            check.examples.append(f"{out / rel}: {type(err).__name__}: {err}")
            continue
        if frames != ref.videos.get(rel):
            check.videos_bad += 1
            check.examples.append(f"{out / rel}: {frames} frames, the reference {ref.videos.get(rel)}")
    return check


# -- runs -------------------------------------------------------------------------------------
@dataclass
class Soak:
    """Everything one soak needs to start `rollbench eval`."""

    workdir: Path
    rng: random.Random
    env: dict[str, str] | None = None  # the eval processes' environment (default: ours)
    min_worker_age_s: float = 2.0
    tear: float = 0.0  # chance that a group kill is followed by a torn last line
    say: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)
    timeout_s: float = 600.0  # one eval process; it is killed and counted as failed after this
    _runs: int = 0

    def argv(self, workload: Workload, mode: str, out: Path) -> list[str]:
        return [sys.executable, "-m", "rollbench", "eval", *workload.flags, *COMMON, f"--eval.mode={mode}", f"--output_dir={out}"]

    def launch(self, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        self._runs += 1
        err = self.workdir / f"run-{self._runs}.stderr"
        with open(err, "wb") as fh:
            # its own session, so that os.killpg reaches the eval process and all its children
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=fh, env=self.env, start_new_session=True)
        return proc, err


@dataclass
class Row:
    workload: str
    mode: str
    worker_kills: int = 0
    group_kills: int = 0
    runs: int = 0
    check: Check = field(default_factory=Check)
    torn_made: int = 0
    torn_found: int = 0  # torn by a kill itself
    torn_unreported: int = 0  # torn, and the next run did not warn about it
    buffers_left: int = 0  # shared-memory files a killed run left behind (removed by the soak)
    video_tmp_left: int = 0  # partial videos (.tmp.mp4) a killed worker left behind
    survivors: int = 0  # processes of a killed group still alive after the kill
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.check.clean and not self.failures and not self.torn_unreported and not self.survivors


def _tail(path: Path) -> str:
    """The run's error line (`rollbench: error: ...`, without the log lines it quotes), else its last line."""
    lines = path.read_text(errors="replace").strip().splitlines()
    errors = [line for line in lines if line.startswith("rollbench: ")]
    return errors[-1] if errors else lines[-1] if lines else "(no stderr)"


def _finish(soak: Soak, proc: subprocess.Popen[bytes], err: Path, timeout: float, row: Row, what: str) -> bool:
    """Wait for a run to end by itself; True when it succeeded."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        row.failures.append(f"{what}: still running after {timeout:.0f} s; killed")
        return False
    if rc != 0:
        row.failures.append(f"{what}: exit {rc}: {_tail(err)}")
        return False
    return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def reference_run(soak: Soak, workload: Workload, mode: str) -> Reference:
    out = soak.workdir / f"{workload.name}-{mode}-reference"
    start = time.perf_counter()
    proc, err = soak.launch(soak.argv(workload, mode, out))
    rc = proc.wait(timeout=soak.timeout_s)
    wall = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"the reference run of {workload.name} ({mode}) failed, exit {rc}: {_tail(err)}")
    scan = scan_log(out)
    outcomes = {r.key: r.outcome() for r in scan.records}
    if len(outcomes) != len(scan.records) or scan.torn or not all(r.ok for r in scan.records):
        raise SystemExit(f"the reference run of {workload.name} ({mode}) is not clean: {out}")
    videos = {rel: video_frames(out / rel) for rel in listed_videos(out)}
    return Reference(outcomes, videos, wall)


def worker_kill_rounds(soak: Soak, workload: Workload, mode: str, ref: Reference, kills: int, row: Row) -> None:
    """Runs in fresh directories, their workers SIGKILLed at random moments, until `kills`."""
    round_ = 0
    while row.worker_kills < kills and round_ <= kills:
        round_ += 1
        out = soak.workdir / f"{workload.name}-{mode}-workers-{round_}"
        proc, err = soak.launch(soak.argv(workload, mode, out))
        row.runs += 1
        made, seen = 0, False
        gap_hi = max(0.5, ref.wall_s / 4)
        while row.worker_kills < kills:
            try:
                proc.wait(timeout=soak.rng.uniform(0.1, gap_hi))
                break  # it finished
            except subprocess.TimeoutExpired:
                pass
            workers = worker_pids(proc.pid)
            seen |= bool(workers)
            ready = [p for p in workers if age_s(p) >= soak.min_worker_age_s]
            if ready:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(soak.rng.choice(ready), signal.SIGKILL)
                    made += 1
                    row.worker_kills += 1
        if not _finish(soak, proc, err, soak.timeout_s, row, f"worker-kill run {out}"):
            return
        row.video_tmp_left += len(list(out.glob("videos/**/.*.tmp.mp4")))
        row.check.add(compare(out, ref))
        soak.say(f"  {workload.name} {mode}: worker-kill run {round_}: {made} kills")
        if not seen:
            row.notes.append(f"{mode} mode: the eval process had no worker processes to kill")
            return


def group_kill_rounds(soak: Soak, workload: Workload, mode: str, ref: Reference, kills: int, row: Row) -> None:
    """Fresh directories; in each, the run's process group is SIGKILLed at random moments and
    the same command rerun, until a rerun completes; until `kills` kills were made."""
    round_ = 0
    while row.group_kills < kills:
        round_ += 1
        out = soak.workdir / f"{workload.name}-{mode}-group-{round_}"
        argv = soak.argv(workload, mode, out)
        torn: set[Path] = set()  # torn log files no run has warned about yet
        made = 0
        while True:
            proc, err = soak.launch(argv)
            row.runs += 1
            if row.group_kills >= kills:  # enough: let this rerun complete
                done = _finish(soak, proc, err, soak.timeout_s, row, f"rerun {out}")
                break
            try:
                rc = proc.wait(timeout=soak.rng.uniform(0.0, ref.wall_s * 1.1))
            except subprocess.TimeoutExpired:
                rc = None
            if rc is not None:  # it completed before the kill came
                done = rc == 0
                if not done:
                    row.failures.append(f"rerun {out}: exit {rc}: {_tail(err)}")
                break
            torn_before = torn_files(out) if (out / "episodes").is_dir() else set()
            _kill_group(proc)
            made += 1
            row.group_kills += 1
            time.sleep(0.1)  # let the kernel finish tearing the group down
            survivors = group_members(proc.pid)
            row.survivors += len(survivors)
            for p in survivors:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            buffers = leftover_buffers(proc.pid)
            row.buffers_left += len(buffers)
            for buf in buffers:
                buf.unlink(missing_ok=True)
            torn -= reported(torn, err)
            if (out / "episodes").is_dir():
                new_torn = torn_files(out) - torn_before
                row.torn_found += len(new_torn)
                torn |= new_torn
                if soak.tear and soak.rng.random() < soak.tear:
                    cut = tear_last_line(out, proc.pid)
                    if cut is not None:
                        row.torn_made += 1
                        torn.add(cut)
        row.torn_unreported += len(torn - reported(torn, err))
        soak.say(f"  {workload.name} {mode}: group-kill round {round_}: {made} kills")
        if not done:
            return
        row.video_tmp_left += len(list(out.glob("videos/**/.*.tmp.mp4")))
        row.check.add(compare(out, ref))


def soak_one(soak: Soak, workload: Workload, mode: str, worker_kills: int, group_kills: int) -> Row:
    start = time.perf_counter()
    row = Row(workload.name, mode)
    soak.say(f"{workload.name} {mode}: reference run")
    ref = reference_run(soak, workload, mode)
    row.runs += 1
    soak.say(f"  {len(ref.outcomes)} episodes, {len(ref.videos)} videos, {ref.wall_s:.1f} s")
    if worker_kills:
        worker_kill_rounds(soak, workload, mode, ref, worker_kills, row)
    if group_kills:
        group_kill_rounds(soak, workload, mode, ref, group_kills, row)
    row.wall_s = time.perf_counter() - start
    return row


# -- the table --------------------------------------------------------------------------------
HEADER = ("workload", "mode", "kills w/g", "runs", "episodes", "lost", "dup", "mismatch", "failed",
          "videos ok/bad/missing", "torn made/found/unrep", "left shm/tmp", "wall s")


def table(rows: Sequence[Row]) -> str:
    cells = [HEADER]
    for r in rows:
        c = r.check
        cells.append((
            r.workload, r.mode, f"{r.worker_kills}/{r.group_kills}", str(r.runs), str(c.compared), str(c.lost),
            str(c.duplicated), str(c.mismatched), str(c.failed_records),
            f"{c.videos_checked - c.videos_bad}/{c.videos_bad}/{c.videos_missing}",
            f"{r.torn_made}/{r.torn_found}/{r.torn_unreported}", f"{r.buffers_left}/{r.video_tmp_left}", f"{r.wall_s:.0f}",
        ))
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of each kind per workload and mode")
    parser.add_argument("--worker-kills", type=int, default=None, help="worker kills per workload and mode (default --kills)")
    parser.add_argument("--group-kills", type=int, default=None, help="group kills per workload and mode (default --kills)")
    parser.add_argument("--workloads", default="metaworld,pusht", help=f"comma list of {', '.join(WORKLOADS)}")
    parser.add_argument("--modes", default="continuous,lockstep", help="comma list of continuous, lockstep")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per task (default: the workload's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments and victims")
    parser.add_argument("--tear", type=float, default=0.25, help="chance a group kill is followed by a torn last line")
    parser.add_argument("--min-worker-age", type=float, default=2.0, help="seconds a worker lives before it may be killed")
    parser.add_argument("--keep", default=None, help="keep the output directories here (default: a temporary one)")
    ns = parser.parse_args(argv)
    unknown = set(ns.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    worker_kills = ns.kills if ns.worker_kills is None else ns.worker_kills
    group_kills = ns.kills if ns.group_kills is None else ns.group_kills
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        workdir = Path(ns.keep) if ns.keep else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
        workdir.mkdir(parents=True, exist_ok=True)
        soak = Soak(workdir, random.Random(ns.seed), tear=ns.tear, min_worker_age_s=ns.min_worker_age)
        workloads = [WORKLOADS[w] if ns.episodes is None else WORKLOADS[w].with_episodes(ns.episodes)
                     for w in ns.workloads.split(",")]
        rows = [soak_one(soak, w, m, worker_kills, group_kills) for w in workloads for m in ns.modes.split(",")]
    print(table(rows))
    total_w, total_g = sum(r.worker_kills for r in rows), sum(r.group_kills for r in rows)
    print(f"\n{total_w} worker kills, {total_g} group kills, {sum(r.check.compared for r in rows)} episodes compared, "
          f"{sum(r.check.lost for r in rows)} lost, {sum(r.check.duplicated for r in rows)} duplicated, "
          f"{sum(r.check.mismatched for r in rows)} mismatched; {time.perf_counter() - start:.0f} s")
    for r in rows:
        for msg in [*r.notes, *r.failures, *r.check.examples]:
            print(f"{r.workload} {r.mode}: {msg}")
        if r.survivors:
            print(f"{r.workload} {r.mode}: {r.survivors} processes outlived a SIGKILL of their group")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
