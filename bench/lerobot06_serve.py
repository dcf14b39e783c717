"""A LeRobot 0.6 checkpoint served on Python 3.12, evaluated by rollbench on this Python (3.11).

    .venv/bin/python bench/lerobot06_serve.py [--venv DIR] [--episodes 4] [--length 30] [--no-lerobot-eval]

LeRobot 0.5+ needs Python 3.12, so it cannot share rollbench's 3.11 environment. From nothing:

1. creates a Python 3.12 venv at `--venv` (default `$ROLLBENCH_LEROBOT06_VENV` or
   /tmp/rollbench-lerobot06) and installs `lerobot[pusht]==0.6.1` (LeRobot's PushT recipe:
   gym-pusht and the `datasets` stack that `lerobot-eval` imports) and rollbench (editable,
   with its `pusht` and `remote` extras) into it; a venv that already holds them is reused,
   and its install steps are reported as skipped (`--reinstall` recreates it);
2. saves a seeded random-init ACT for PushT pixels there with LeRobot 0.6's own API
   (`tests/lerobot_helpers.make_checkpoint`: `save_pretrained` of the policy and of its
   pre/post processor pipelines);
3. evaluates it in-process in the 3.12 venv (`--eval.mode=lockstep --eval.batch_size=1`):
   the reference;
4. starts `rollbench serve --policy.type=lerobot` in the 3.12 venv (`--serve.max_batch_size=1`)
   and waits for /healthz;
5. runs `rollbench eval --policy.type=remote` here, once per dialect (openpi, vla-eval);
6. compares every episode (success, sum and max reward, steps, seed) of the two dialects
   with each other and with the reference, bit for bit; and the reference with
   `lerobot-eval` 0.6.1 itself at `--eval.batch_size=1` (success and max reward bit for bit,
   the sum to 1e-12: LeRobot sums a float64 tensor; `--no-lerobot-eval` skips it).

torch's CPU kernels are bitwise invariant neither to the thread count nor to the rows per
call (docs/lerobot.md), so every torch process gets OMP_NUM_THREADS=1 and one row per call.
Prints a summary; exit 0 when every comparison holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON312 = Path.home() / ".pyenv/versions/3.12.1/bin/python"
SEED = 1000

Episode = tuple[bool, float, float, int, int]  # success, sum_reward, max_reward, n_steps, seed

MAKE_CHECKPOINT = """
import sys
from pathlib import Path
from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig
make_checkpoint(Path(sys.argv[1]), PushTConfig(), seed=0)
"""

VERSIONS = """
import sys, importlib.metadata as m
print(sys.version.split()[0], m.version("lerobot"), m.version("torch"), m.version("rollbench"))
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], logfile: Path, env: dict[str, str], timeout: float = 1800) -> float:
    """Run `cmd` with its output in `logfile`; its wall time, or exit 1 with the log's tail."""
    t0 = time.perf_counter()
    with logfile.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = logfile.read_text()[-3000:]
        sys.exit(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}) after {wall:.1f} s; {logfile}:\n{tail}")
    return wall


def venv_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def installed(venv: Path, lerobot: str) -> bool:
    """The venv already holds `lerobot==VERSION` and rollbench from this checkout."""
    py = venv / "bin/python"
    if not py.exists():
        return False
    probe = (
        "import importlib.metadata as m, rollbench, websockets, msgpack, gym_pusht, datasets;"
        "print(m.version('lerobot'), rollbench.__file__)"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=venv_env(venv))
    if out.returncode != 0:
        return False
    version, path = out.stdout.split()
    return version == lerobot and Path(path).resolve().is_relative_to(REPO / "src")


def install(args: argparse.Namespace, work: Path) -> dict[str, float | str]:
    venv, env = args.venv, venv_env(args.venv)
    if installed(venv, args.lerobot) and not args.reinstall:
        log(f"reusing {venv} (lerobot {args.lerobot} and rollbench from {REPO} already there)")
        return {"venv": "skipped (reused)", "lerobot": "skipped (reused)", "rollbench": "skipped (reused)"}
    if not args.python.exists():
        sys.exit(f"--python={args.python}: not found; LeRobot 0.6 needs Python >= 3.12 (pyenv install 3.12.1)")
    times: dict[str, float | str] = {}
    log(f"creating a venv at {venv} with {args.python}")
    clear = ["--clear"] if args.reinstall else []
    times["venv"] = run([str(args.python), "-m", "venv", *clear, str(venv)], work / "venv.log", env)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar=off"]
    log(f"pip install lerobot[pusht]=={args.lerobot} (torch included: minutes, ~6 GB)")
    times["lerobot"] = run([*pip, f"lerobot[pusht]=={args.lerobot}"], work / "pip-lerobot.log", env)
    log("pip install -e rollbench[pusht,remote]")
    times["rollbench"] = run([*pip, "-e", f"{REPO}[pusht,remote]"], work / "pip-rollbench.log", env)
    return times


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, proc: subprocess.Popen[Any], logfile: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"rollbench serve exited {proc.returncode} before it was healthy; {logfile}:\n{logfile.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"rollbench serve not healthy after {timeout:.0f} s; {logfile}")


def episodes(out: Path) -> list[Episode]:
    info = json.loads((out / "eval_info.json").read_text())
    rows = []
    for task in info["per_task"]:
        m = task["metrics"]
        for i in sorted(range(len(m["episode_ix"])), key=lambda i: m["episode_ix"][i]):
            rows.append((m["successes"][i], m["sum_rewards"][i], m["max_rewards"][i], m["n_steps"][i], m["seeds"][i]))
    return rows


def lerobot_eval_episodes(out: Path) -> list[tuple[bool, float, float]]:
    (task,) = json.loads((out / "eval_info.json").read_text())["per_task"]
    m = task["metrics"]
    return list(zip(m["successes"], m["sum_rewards"], m["max_rewards"], strict=True))


def close_to(a: list[tuple[bool, float, float]], b: list[tuple[bool, float, float]]) -> bool:
    """Success and max reward bit for bit; the sum to 1e-12 (LeRobot sums a float64 tensor)."""
    return len(a) == len(b) and all(
        sa == sb and ma == mb and math.isclose(xa, xb, rel_tol=1e-12, abs_tol=1e-12)
        for (sa, xa, ma), (sb, xb, mb) in zip(a, b, strict=True)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path(os.environ.get("ROLLBENCH_LEROBOT06_VENV", "/tmp/rollbench-lerobot06")))
    ap.add_argument("--python", type=Path, default=PYTHON312, help="the Python >= 3.12 that creates the venv")
    ap.add_argument("--lerobot", default="0.6.1")
    ap.add_argument("--reinstall", action="store_true", help="recreate the venv even if it holds lerobot and rollbench")
    ap.add_argument("--work", type=Path, default=None, help="checkpoint, runs and logs (default: VENV-work)")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--length", type=int, default=30, help="--env.episode_length")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--no-lerobot-eval", dest="lerobot_eval", action="store_false", help="skip the comparison with lerobot-eval")
    args = ap.parse_args()
    work = (args.work or args.venv.with_name(args.venv.name + "-work")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("runs", "act_pusht"):  # this script's own outputs: every run starts afresh, no resume
        shutil.rmtree(work / stale, ignore_errors=True)
    venv = args.venv = args.venv.resolve()
    t_all = time.perf_counter()

    times = install(args, work)
    env12 = venv_env(venv)
    versions = subprocess.run([str(venv / "bin/python"), "-c", VERSIONS], capture_output=True, text=True, env=env12, check=True).stdout.split()
    log(f"server side: Python {versions[0]}, lerobot {versions[1]}, torch {versions[2]}")

    ckpt = work / "act_pusht"
    log(f"saving a random-init ACT (seed 0) for PushT pixels with lerobot {versions[1]} into {ckpt}")
    times["checkpoint"] = run(
        [str(venv / "bin/python"), "-c", MAKE_CHECKPOINT, str(ckpt)], work / "checkpoint.log", venv_env(venv, PYTHONPATH=str(REPO / "tests"))
    )
    saved = sorted(p.name for p in ckpt.iterdir())

    common = [
        "--env.type=pusht", f"--env.episode_length={args.length}", f"--eval.n_episodes={args.episodes}", f"--seed={SEED}",
        "--eval.max_episodes_rendered=0",
    ]
    results: dict[str, list[Episode]] = {}
    log("in-process reference in the 3.12 venv (lockstep, batch 1)")
    times["eval in-process (3.12)"] = run(
        [str(venv / "bin/rollbench"), "eval", *common, "--policy.type=lerobot", f"--policy.path={ckpt}",
         "--eval.mode=lockstep", "--eval.batch_size=1", f"--output_dir={work / 'runs/inprocess'}"],
        work / "eval-inprocess.log", env12,
    )
    results["in-process"] = episodes(work / "runs/inprocess")

    port = args.port or free_port()
    serve_log = work / "serve.log"
    log(f"rollbench serve on port {port} (3.12 venv)")
    t0 = time.perf_counter()
    with serve_log.open("w") as out:
        server = subprocess.Popen(
            [str(venv / "bin/rollbench"), "serve", "--policy.type=lerobot", f"--policy.path={ckpt}", "--env.type=pusht",
             f"--env.episode_length={args.length}", f"--port={port}", "--serve.max_batch_size=1"],
            stdout=out, stderr=subprocess.STDOUT, env=env12, cwd=REPO,
        )
    stats: dict[str, Any] = {}
    try:
        wait_healthy(port, server, serve_log)
        times["server start"] = time.perf_counter() - t0
        env11 = {**os.environ, "OMP_NUM_THREADS": "1"}
        client = subprocess.run([sys.executable, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True, check=True)
        log(f"client side: Python {client.stdout.strip()} ({sys.executable})")
        for protocol in ("openpi", "vla-eval"):
            log(f"rollbench eval --policy.type=remote --policy.protocol={protocol} (this venv)")
            times[f"eval {protocol}"] = run(
                [sys.executable, "-m", "rollbench", "eval", *common, "--policy.type=remote", f"--policy.url=ws://127.0.0.1:{port}",
                 f"--policy.protocol={protocol}", "--policy.replan_steps=1", "--workers=2",
                 f"--output_dir={work / 'runs' / protocol}"],
                work / f"eval-{protocol}.log", env11,
            )
            results[protocol] = episodes(work / "runs" / protocol)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
            stats = json.loads(r.read())
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()

    checks = {
        "openpi == vla-eval": results["openpi"] == results["vla-eval"],
        "served == in-process": results["openpi"] == results["in-process"],
    }
    if args.lerobot_eval:
        log("lerobot-eval (3.12 venv, batch 1)")
        times["lerobot-eval (3.12)"] = run(
            [str(venv / "bin/lerobot-eval"), f"--policy.path={ckpt}", "--policy.device=cpu", "--env.type=pusht",
             f"--env.episode_length={args.length}", f"--eval.n_episodes={args.episodes}", "--eval.batch_size=1",
             f"--seed={SEED}", f"--output_dir={work / 'runs/lerobot-eval'}"],
            work / "lerobot-eval.log", env12,
        )
        theirs = lerobot_eval_episodes(work / "runs/lerobot-eval")
        checks["in-process == lerobot-eval (sum to 1e-12)"] = close_to([r[:3] for r in results["in-process"]], theirs)

    print(f"server: Python {versions[0]}, lerobot {versions[1]}, torch {versions[2]} ({venv})")
    print(f"client: Python {client.stdout.strip()} ({sys.executable})")
    print(f"checkpoint: {ckpt} ({', '.join(saved)})")
    print("times:")
    for step, t in times.items():
        print(f"  {step:<28} {t if isinstance(t, str) else f'{t:7.1f} s'}")
    print(f"  {'total':<28} {time.perf_counter() - t_all:7.1f} s")
    keys = ("calls", "rows", "requests", "errors", "connections")
    print("server stats: " + ", ".join(f"{k} {stats.get(k)}" for k in keys if k in stats))
    print(f"episodes compared: {len(results['in-process'])} (seeds {SEED}..{SEED + args.episodes - 1}, {args.length} steps each)")
    print("  seed   success  sum_reward            max_reward            steps")
    for success, total, best, steps, seed in results["in-process"]:
        print(f"  {seed:<6} {success!s:<8} {total!r:<21} {best!r:<21} {steps}")
    if not any(r[1] > 0 for r in results["in-process"]):
        print("warning: no episode earned a reward; the comparison says little")
    for name, ok in checks.items():
        print(f"equal: {name}: {'yes' if ok else 'NO'}")
    if not all(checks.values()):
        for name, rows in results.items():
            print(f"  {name}: {rows}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
