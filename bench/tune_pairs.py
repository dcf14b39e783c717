"""Is `rollbench tune`'s prediction right on a noisy machine? N tune -> eval pairs in a row.

    .venv/bin/python bench/tune_pairs.py                       # 5 pairs, the issue's workload
    .venv/bin/python bench/tune_pairs.py --load=alternate      # a core kept busy in pairs 2, 4, ...
    .venv/bin/python bench/tune_pairs.py --pairs 0 --share     # only the probe's share of the wall

Each pair: `rollbench tune <flags>`, then the command it recommends. The prediction is
tune's `predicted_steps_per_s`, which predicts what eval_info.json reports: the episodes'
steps over `overall.eval_s` (the first episode's start to the last one's end, start-up
excluded). With `--load=alternate`, a background process burns one core from before the
tune to after the eval of every other pair (`always`: every pair), so a pair is measured
and run under the same load.

`--share` then runs `rollbench eval --workers=auto` on a small run (the workload as given)
and on a large one (`--large-episodes` per task), each with an empty probe cache, and the
small one again with the probe the pairs stored: the probe's seconds (eval_info.json
`tune.probe`) against the command's wall.

Workload (the issue's): MetaWorld push, reach, door-open, window-open x 20 episodes, the
scripted experts, no videos. Prints a table per pair and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proctable import cpu_table

BIN = Path(sys.executable).parent
WORKLOAD = ["--env.type=metaworld", "--env.task=push-v3,reach-v3,door-open-v3,window-open-v3",
            "--policy.type=expert", "--eval.max_episodes_rendered=0"]


class CpuWatch:
    """Cores other processes keep busy while a command runs: /proc/<pid>/stat of every
    process sampled every 0.2 s, ours (this script's descendants: the command, its workers,
    the forkserver's children) told apart by ancestry; the burner counts as another's.
    Processes that live less than a sample interval are missed."""

    def __init__(self, exclude: set[int] | None = None) -> None:
        self.exclude = exclude or set()
        self.others = 0.0
        self.ours = 0.0
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        stats = cpu_table()
        me = os.getpid()

        def ours(pid: int) -> bool:
            for _ in range(64):
                if pid in self.exclude or pid <= 1 or pid not in stats:
                    return False
                if pid == me:
                    return True
                pid = stats[pid][0]
            return False

        for pid, (_, cpu) in stats.items():
            before = self._last.get(pid)
            if before is not None and pid != me:
                if ours(pid):
                    self.ours += cpu - before
                else:
                    self.others += cpu - before
            self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> CpuWatch:
        self._sample()
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.seconds = time.perf_counter() - self._t0


def rollbench(args: list[str], cache: Path, exclude: set[int] | None = None) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """(the finished command, its wall, the cores other processes kept busy meanwhile)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    with CpuWatch(exclude) as watch:
        t0 = time.perf_counter()
        proc = subprocess.run([str(BIN / "rollbench"), *args], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rollbench {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc, wall, watch.others / watch.seconds


def achieved(out: Path) -> tuple[float, float, int, dict[str, Any]]:
    """(steps / eval_s, eval_s, steps, eval_info) of a finished run."""
    info = json.loads((out / "eval_info.json").read_text())
    steps = sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"])
    eval_s = float(info["overall"]["eval_s"])
    return steps / eval_s, eval_s, steps, info


class Burner:
    """One process keeping one core busy (or nothing)."""

    def __init__(self, on: bool) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None

    def __enter__(self) -> Burner:
        if self.proc is not None:
            time.sleep(0.5)  # let it reach full speed
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def pairs(args: argparse.Namespace, flags: list[str], root: Path) -> list[dict[str, Any]]:
    rows = []
    for i in range(args.pairs):
        loaded = args.load == "always" or (args.load == "alternate" and i % 2 == 1)
        with Burner(loaded) as burner:
            burn = {burner.proc.pid} if burner.proc is not None else set()
            tune_json = root / f"tune{i}.json"
            _, tune_wall, tune_others = rollbench(["tune", *flags, f"--tune.budget_s={args.budget}", f"--tune.output={tune_json}"],
                                                  root / "cache-pairs", burn)
            data = json.loads(tune_json.read_text())
            command = shlex.split(data["command"])[2:]
            out = root / f"eval{i}"
            _, eval_wall, eval_others = rollbench(["eval", *command, f"--output_dir={out}"], root / "cache-pairs", burn)
        rate, eval_s, steps, _ = achieved(out)
        pred = float(data["predicted_steps_per_s"])
        row = {"pair": i + 1, "load": "1 core busy" if loaded else "-", "predicted": pred, "achieved": rate,
               "error": pred / rate - 1.0, "probe_s": float(data["probe"]["took_s"]), "tune_wall": tune_wall,
               "eval_wall": eval_wall, "eval_s": eval_s, "steps": steps, "others": (tune_others, eval_others),
               "flags": " ".join(command[len(flags):])}
        rows.append(row)
        env = data["probe"]["env"]
        loops = [(env.get(k) or {}).get("value") or 0.0 for k in ("loop_ms_1", "loop_ms_all")]
        print(f"pair {i + 1}: predicted {pred:7.0f}, achieved {rate:7.0f} env-steps/s, error {row['error']:+.0%} "
              f"({row['load']}; others {tune_others:.2f} / {eval_others:.2f} cores; worker loop alone {loops[0]:.3f} ms, "
              f"{env.get('parallel', 1)} at once {loops[1]:.3f} ms; {row['flags']})", file=sys.stderr, flush=True)
    return rows


def share_run(name: str, flags: list[str], root: Path, cache: Path) -> dict[str, Any]:
    out = root / f"share-{name}"
    proc, wall, others = rollbench(["eval", *flags, "--workers=auto", f"--output_dir={out}"], cache)
    rate, eval_s, steps, info = achieved(out)
    tuned = info.get("tune") or {}
    probe = tuned.get("probe") or {}
    said = ("--workers=auto: probed in", "--workers=auto: probe reused", "--workers=auto: no probe", "--workers=auto: probe loaded")
    line = next((ln for ln in proc.stderr.splitlines() if any(k in ln for k in said)), "")
    pred = tuned.get("predicted_steps_per_s")
    return {"run": name, "how": probe.get("how", "?"), "probe_s": float(probe.get("seconds", 0.0)), "wall": wall,
            "eval_s": eval_s, "steps": steps, "achieved": rate, "predicted": pred,
            "predicted_wall": tuned.get("predicted_wall_s"), "others": others, "line": line.split("--workers=auto: ", 1)[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20, help="--eval.n_episodes per task (the pairs and the small run)")
    ap.add_argument("--load", choices=("none", "alternate", "always"), default="none")
    ap.add_argument("--budget", type=float, default=30.0, help="rollbench tune's --tune.budget_s")
    ap.add_argument("--share", action="store_true", help="also measure --workers=auto's probe share, small and large run")
    ap.add_argument("--large-episodes", type=int, default=400, help="--eval.n_episodes per task of the large run")
    args = ap.parse_args()

    flags = [*WORKLOAD, f"--eval.n_episodes={args.episodes}"]
    with tempfile.TemporaryDirectory(prefix="tune_pairs_") as tmp:
        root = Path(tmp)
        rows = pairs(args, flags, root)
        if rows:
            print(f"{args.pairs} tune -> eval pairs, {' '.join(flags)}; load: {args.load}")
            print("predicted: tune's predicted_steps_per_s; achieved: eval_info.json steps / overall.eval_s; "
                  "others: cores other processes kept busy during the tune / the eval (the burner included)")
            print(f"{'pair':>4} {'load':12s} {'predicted':>9s} {'achieved':>9s} {'error':>7s} {'probe s':>8s} "
                  f"{'eval wall s':>11s} {'eval_s':>7s} {'others tune/eval':>16s}  recommended")
            for r in rows:
                print(f"{r['pair']:>4} {r['load']:12s} {r['predicted']:9.0f} {r['achieved']:9.0f} {r['error']:+7.0%} "
                      f"{r['probe_s']:8.1f} {r['eval_wall']:11.1f} {r['eval_s']:7.2f} "
                      f"{r['others'][0]:9.2f} /{r['others'][1]:5.2f}  {r['flags']}")
            errs = [r["error"] for r in rows]
            inside = sum(abs(e) <= 0.25 for e in errs)
            print(f"median error {statistics.median(errs):+.0%}, median |error| {statistics.median(abs(e) for e in errs):.0%}, "
                  f"worst {max(errs, key=abs):+.0%}; {inside} of {len(errs)} within +-25%")
        if args.share:
            runs = [
                share_run("small", flags, root, root / "cache-empty-small"),
                share_run("large", [*WORKLOAD, f"--eval.n_episodes={args.large_episodes}"], root, root / "cache-empty-large"),
            ]
            if rows:
                runs.append(share_run("small, stored", flags, root, root / "cache-pairs"))
            print("\n--workers=auto: the probe's share of the wall (eval_info.json tune.probe.seconds / the command's wall)")
            print(f"{'run':14s} {'probe':9s} {'probe s':>8s} {'wall s':>7s} {'share':>6s} {'predicted':>9s} {'achieved':>9s} "
                  f"{'others':>6s}")
            for r in runs:
                pred = f"{r['predicted']:9.0f}" if r["predicted"] else f"{'-':>9s}"
                print(f"{r['run']:14s} {r['how']:9s} {r['probe_s']:8.2f} {r['wall']:7.1f} {r['probe_s'] / r['wall']:6.1%} "
                      f"{pred} {r['achieved']:9.0f} {r['others']:6.2f}")
            for r in runs:
                print(f"  {r['run']}: {r['line']}")


if __name__ == "__main__":
    main()
