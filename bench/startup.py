"""Time to the first env step of a LeRobot checkpoint on PushT pixels: this rollbench against an older one.

    .venv/bin/python bench/startup.py [--policy act|diffusion|both] [--repeats 5] [--episodes 2]
        [--mode auto|continuous|lockstep] [--warmup 1] [--old-rev 82c6728^] [--old-src DIR]

"Time to the first env step" is the wall time from launching `python -m rollbench eval` (unix
time taken right before `subprocess.Popen`) to the first `PushTEnv.step` call in any of the
run's processes, driver or env workers: a `sitecustomize` hook on PYTHONPATH wraps
`gym_pusht.envs.pusht.PushTEnv.step` when that module is first imported (not before: the hook
adds no import to any process) and each process appends the time of its first call to a file.

"new" is this working tree's `src/` (the editable install). "old" is `--old-rev` (default
`82c6728^`, the commit before start-up was reworked: only ACT's/Diffusion's LeRobot modules
imported, the weights loaded on a thread while env workers start), checked out into a
temporary git worktree (removed at the end) and run with its `src/` first on PYTHONPATH, or
`--old-src DIR` to use an existing checkout. Each runs in a fresh temporary directory as cwd.

Policies: a tiny random-init ACT and Diffusion for PushT pixels (tests/lerobot_helpers.py,
the same as the tests'). Each run: `--eval.n_episodes=EPISODES` (2) `--env.episode_length=LENGTH` (5), report
and videos off, rollbench's default scheduling (`--mode` passes `--eval.mode=`), offline
(HF_HUB_OFFLINE=1). Per policy, `--warmup` unmeasured runs of each version come first (cold
file caches), then the repeats interleaved old, new, old, new... The table gives the median,
min and max per version, the ratio of the medians new/old and the scheduling each version
chose (eval_info.json: mode, placement, workers x slots; the default may differ between
versions, e.g. a Diffusion checkpoint: `--mode` makes them equal); then the `startup` moments the
new version writes into eval_info.json (seconds after its driver process started; the older
version may not write them), as medians. Machines here are shared: read the ratio, and run it
where nothing else runs for absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from import_hook import AFTER_IMPORT  # noqa: E402  (bench/, on sys.path above)

OLD_REV = "82c6728^"
POLICIES = ("act", "diffusion")
MOMENTS = ("lerobot_imported", "policy_checked", "policy_ready", "first_env_step")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Patches PushTEnv.step as gym_pusht.envs.pusht is imported, so a process that never imports
# it pays nothing; the first call in each process (fork-safe: by pid) appends "time pid".
STEP_HOOK = AFTER_IMPORT + '''
import os, time

_seen = []

def _timed(step):
    def first_step_timed(self, action):
        if os.getpid() not in _seen:
            _seen.append(os.getpid())
            fd = os.open(os.environ["STARTUP_FIRST_STEP"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{time.time():.6f} {os.getpid()}\\n".encode())
            os.close(fd)
        return step(self, action)
    return first_step_timed

def _patch(module):
    module.PushTEnv.step = _timed(module.PushTEnv.step)

if os.environ.get("STARTUP_FIRST_STEP"):
    after_import({"gym_pusht.envs.pusht": _patch})
'''

# which rollbench a version's processes import, checked before anything is timed
WHICH = "import rollbench; print(rollbench.__file__)"


@dataclass(frozen=True)
class Version:
    name: str
    src: Path  # the src/ directory whose rollbench the processes must import
    pythonpath: tuple[str, ...]  # put after the hook on PYTHONPATH


@dataclass
class Samples:
    first_step: list[float] = field(default_factory=list)
    moments: list[dict[str, float]] = field(default_factory=list)
    scheduling: set[str] = field(default_factory=set)


def make_checkpoint(policy: str, out: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from lerobot_helpers import make_checkpoint as make
    from rollbench.benchmarks.pusht import PushTConfig

    return make(out, PushTConfig(), policy_type=policy)


@contextmanager
def old_source(rev: str, given: Path | None) -> Iterator[Path]:
    """The old version's src/: `given`, or `rev` checked out into a temporary worktree."""
    if given is not None:
        yield given
        return
    where = Path(tempfile.mkdtemp(prefix="startup_old_"))
    shutil.rmtree(where)
    git = ["git", "-C", str(REPO)]
    subprocess.run([*git, "worktree", "add", "--detach", str(where), rev], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=120)
    try:
        yield where / "src"
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(where)], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=120)


def process_env(hook: Path, version: Version, record: Path | None) -> dict[str, str]:
    env = {**os.environ, **OFFLINE}
    env["PYTHONPATH"] = os.pathsep.join([str(hook), *version.pythonpath])
    env.pop("STARTUP_FIRST_STEP", None)
    if record is not None:
        env["STARTUP_FIRST_STEP"] = str(record)
    return env


def check_import(version: Version, hook: Path, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", WHICH], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=process_env(hook, version, None), stdin=subprocess.DEVNULL)
    got = Path(proc.stdout.strip()).resolve() if proc.returncode == 0 else None
    if got is None or not got.is_relative_to(version.src.resolve()):
        sys.exit(f"{version.name}: expected rollbench from {version.src}, the processes import {got or proc.stderr[-2000:]}")
    print(f"{version.name}: rollbench from {got.parent}", file=sys.stderr)


def scheduling(info: dict) -> str:
    s = info.get("scheduling") or {}
    return f"{s.get('mode')} {s.get('placement')} {s.get('workers')}x{s.get('slots_per_worker')}"


def run_once(version: Version, ckpt: Path, hook: Path, work: Path, args: argparse.Namespace) -> tuple[float, dict]:
    """(seconds from launch to the first env step, the run's eval_info.json)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    record, out = work / "first_step.txt", work / "run"
    mode = [f"--eval.mode={args.mode}"] if args.mode else []
    cmd = [sys.executable, "-m", "rollbench", "eval", "--env.type=pusht", "--env.obs_type=pixels_agent_pos",
           f"--policy.path={ckpt}", f"--eval.n_episodes={args.episodes}", f"--env.episode_length={args.episode_length}",
           "--eval.report=false", "--eval.max_episodes_rendered=0", *mode, f"--output_dir={out}"]
    env = process_env(hook, version, record)
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{version.name}: {' '.join(cmd)} exited {proc.returncode}:\n{err[-3000:]}")
    lines = record.read_text().split() if record.exists() else []
    if not lines:
        sys.exit(f"{version.name}: {' '.join(cmd)} ran, but no process called PushTEnv.step (hook on PYTHONPATH?)")
    first = min(float(t) for t in lines[::2])
    return first - start, json.loads((out / "eval_info.json").read_text())


def table(rows: list[list[str]], left: tuple[int, ...] = (0, 1)) -> str:
    """Columns padded to their widest cell; those in `left` left-aligned, numbers right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                     .rstrip() for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", choices=[*POLICIES, "both"], default="both")
    ap.add_argument("--repeats", type=int, default=5, help="measured runs per version and policy (default 5)")
    ap.add_argument("--episodes", type=int, default=2, help="--eval.n_episodes (default 2)")
    ap.add_argument("--episode-length", type=int, default=5, help="--env.episode_length (default 5)")
    ap.add_argument("--mode", choices=["auto", "continuous", "lockstep"], default=None,
                    help="--eval.mode for both versions (default: not passed, rollbench's default)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs per version and policy first (default 1)")
    ap.add_argument("--old-rev", default=OLD_REV, help=f"the old version's git revision (default {OLD_REV})")
    ap.add_argument("--old-src", type=Path, default=None, help="an existing checkout's src/ instead of --old-rev")
    args = ap.parse_args()
    policies = POLICIES if args.policy == "both" else (args.policy,)
    old_commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.old_rev], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=60).stdout.strip()

    with tempfile.TemporaryDirectory(prefix="rollbench-bench-startup-") as tmp, old_source(args.old_rev, args.old_src) as old_src:
        root = Path(tmp)
        hook = root / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(STEP_HOOK)
        versions = (Version("old", old_src, (str(old_src),)), Version("new", REPO / "src", ()))
        for version in versions:
            check_import(version, hook, root)
        ckpts = {p: make_checkpoint(p, root / "ckpt" / p) for p in policies}
        samples = {(p, v.name): Samples() for p in policies for v in versions}
        for policy in policies:
            for i in range(args.warmup):
                for version in versions:
                    took, _ = run_once(version, ckpts[policy], hook, root / "work", args)
                    print(f"{policy} warm-up {i + 1} {version.name}: {took:.2f} s (not counted)", file=sys.stderr, flush=True)
            for i in range(args.repeats):
                for version in versions:
                    took, info = run_once(version, ckpts[policy], hook, root / "work", args)
                    s = samples[(policy, version.name)]
                    s.first_step.append(took)
                    s.moments.append(info.get("startup") or {})
                    s.scheduling.add(scheduling(info))
                    print(f"{policy} #{i + 1} {version.name}: first env step after {took:.2f} s", file=sys.stderr, flush=True)

    load = os.getloadavg()
    print(f"\nold = {args.old_rev} ({old_commit or 'given src'}{f', {args.old_src}' if args.old_src else ''}), "
          f"new = {REPO / 'src'}; {args.repeats} repeats, {args.episodes} episodes of {args.episode_length} steps, "
          f"mode {args.mode or 'default'}; load average now {load[0]:.1f} on {os.cpu_count()} CPUs")
    rows = [["version", "policy", "median s", "min s", "max s", "new/old", "scheduling (mode placement workers x slots)"]]
    for policy in policies:
        medians = {}
        for v in ("old", "new"):
            xs = samples[(policy, v)].first_step
            medians[v] = statistics.median(xs)
            ratio = f"{medians['new'] / medians['old']:.2f}" if v == "new" else ""
            rows.append([v, policy, f"{medians[v]:.2f}", f"{min(xs):.2f}", f"{max(xs):.2f}", ratio,
                         ", ".join(sorted(samples[(policy, v)].scheduling))])
    print(table(rows, left=(0, 1, 6)))

    print("\neval_info.json startup moments (median seconds after the driver process started)")
    rows = [["version", "policy", *MOMENTS]]
    for policy in policies:
        for v in ("old", "new"):
            runs = samples[(policy, v)].moments
            cells = []
            for m in MOMENTS:
                xs = [r[m] for r in runs if m in r]
                cells.append(f"{statistics.median(xs):.2f}" if xs else "-")
            rows.append([v, policy, *cells])
    print(table(rows))


if __name__ == "__main__":
    main()
