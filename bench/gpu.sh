#!/usr/bin/env bash
# rollbench continuous vs lockstep vs lerobot-eval on one GPU machine (an H200, 16 cores), with
# the GPU's utilisation during each run.
#
#     bash bench/gpu.sh            # results in $OUT if set, else ./gpu_bench_out
#
# Tiny random-init SmolVLA, then ACT (built offline by the tests' helpers), on MetaWorld MT10
# pixels (480x480, 2 episodes per task, 50 steps), rendered with EGL on the GPU, the policy on
# cuda, rollbench with 16 workers. Every run is one `bench/vs_lerobot.py --modes <mode>`
# (its docstring says what is measured) under `timeout`, with `nvidia-smi` sampling the GPU
# every 500 ms beside it. The whole script stays within 10 minutes: each run's limit is cut to
# what is left, and a run that no longer fits is skipped and named. Checks its preconditions
# first and stops with one line if one fails. Environment: PYTHON (default .venv/bin/python,
# else python3), WORKERS (16), POLICIES ("smolvla act"), RUN_LIMIT_S (120: a rollbench run's limit),
# LEROBOT_EVAL_LIMIT_S (180: lerobot-eval's; on 2 CPU cores it took ~10 min for SmolVLA here).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
BUDGET_S=570  # 10 minutes, less the summary's margin
RUN_LIMIT_S=${RUN_LIMIT_S:-120}
LEROBOT_EVAL_LIMIT_S=${LEROBOT_EVAL_LIMIT_S:-180}
WORKERS=${WORKERS:-16}
POLICIES=${POLICIES:-"smolvla act"}
MODES=(continuous lockstep lerobot-eval)
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT=${OUT:-./gpu_bench_out}
export MUJOCO_GL=egl HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

die() {
    echo "bench/gpu.sh: $*" >&2
    exit 1
}

# One line from a Python check: its message (printed by it) or the last line of what it raised.
check() {
    local what=$1 limit=$2 code=$3 msg
    msg=$(timeout -k 5 "$limit" "$PYTHON" -c "$code" </dev/null 2>&1) && return 0
    die "$what: $(printf '%s\n' "$msg" | grep -v '^\s*$' | tail -n 1)"
}

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs a machine with an NVIDIA GPU and its driver"
timeout 30 nvidia-smi -L </dev/null >/dev/null 2>&1 || die "nvidia-smi sees no GPU ($(timeout 30 nvidia-smi -L 2>&1 | head -n 1))"
command -v "$PYTHON" >/dev/null || die "no Python at $PYTHON: set PYTHON to the interpreter of rollbench's environment"
check "Python environment" 120 "import rollbench, lerobot, metaworld, num2words, torch"
check "CUDA" 120 "
import torch
if not torch.cuda.is_available():
    raise SystemExit('torch.cuda.is_available() is False (torch ' + torch.__version__ + ', built for CUDA ' + str(torch.version.cuda) + ')')
torch.ones(8, device='cuda').sum().item()"
check "EGL (MUJOCO_GL=egl)" 60 "
import mujoco
ctx = mujoco.GLContext(64, 64)
ctx.make_current()
from OpenGL import GL
renderer = GL.glGetString(GL.GL_RENDERER).decode()
ctx.free()
if 'nvidia' not in renderer.lower():
    raise SystemExit('EGL renders on ' + repr(renderer) + ', not the NVIDIA GPU (is libEGL_nvidia installed?)')"

mkdir -p "$OUT" || die "cannot create $OUT"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$PYTHON" -c "import torch, lerobot; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| lerobot', lerobot.__version__)"
    echo "cores $(nproc), workers $WORKERS, MUJOCO_GL=$MUJOCO_GL"
} >"$OUT/machine.txt" 2>&1

for policy in $POLICIES; do
    for mode in "${MODES[@]}"; do
        tag="$policy-$mode"
        cap=$RUN_LIMIT_S
        [ "$mode" = lerobot-eval ] && cap=$LEROBOT_EVAL_LIMIT_S
        limit=$((BUDGET_S - SECONDS))
        ((limit > cap)) && limit=$cap
        if ((limit < 45)); then
            echo "$tag: skipped, ${limit}s left of the 10-minute budget" | tee "$OUT/$tag.skipped"
            continue
        fi
        nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv -lms 500 >"$OUT/$tag.gpu.csv" 2>/dev/null &
        smi=$!
        start=$SECONDS
        timeout -k 10 "$limit" "$PYTHON" bench/vs_lerobot.py --workload mt10 --policy "$policy" --modes "$mode" \
            --device cuda --workers "$WORKERS" --repeats 1 --json "$OUT/$tag.json" </dev/null >"$OUT/$tag.log" 2>&1
        rc=$?
        kill "$smi" 2>/dev/null
        wait "$smi" 2>/dev/null
        case $rc in
            0) echo "$tag: done in $((SECONDS - start)) s" ;;
            124 | 137) echo "$tag: timed out after ${limit}s (log: $OUT/$tag.log)" | tee "$OUT/$tag.failed" ;;
            *) echo "$tag: failed ($rc): $(tail -n 1 "$OUT/$tag.log")" | tee "$OUT/$tag.failed" ;;
        esac
    done
done

# The table: each run's medians from its JSON, ratios against the same policy's lerobot-eval run,
# the GPU's mean utilisation and peak memory over the run's samples.
"$PYTHON" - "$OUT" $POLICIES <<'EOF' | tee "$OUT/summary.txt"
import json
import statistics
import sys
from pathlib import Path

out, policies = Path(sys.argv[1]), sys.argv[2:]
modes = ("continuous", "lockstep", "lerobot-eval")


def gpu(tag):
    util, mem = [], []
    for line in (out / f"{tag}.gpu.csv").read_text().splitlines() if (out / f"{tag}.gpu.csv").exists() else []:
        try:
            u, m = (int(x.split()[0]) for x in line.split(","))
        except (ValueError, IndexError):
            continue  # the header, [N/A] or a half-written line
        util.append(u)
        mem.append(m)
    return (statistics.mean(util), max(mem)) if util else (None, None)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


print(f"{'policy':8s} {'mode':13s} {'wall s':>7s} {'env-steps/s':>11s} {'rows/call':>9s} {'rows/net':>8s} "
      f"{'x lerobot-eval':>14s} {'GPU util %':>10s} {'GPU MiB':>8s}")
for policy in policies:
    res = {m: json.loads((out / f"{policy}-{m}.json").read_text()) for m in modes if (out / f"{policy}-{m}.json").exists()}
    steps = max((r["env_steps"] for r in res.values() if r["env_steps_counted"]), default=None)
    le = res.get("lerobot-eval", {}).get("modes", {}).get("lerobot-eval")
    for mode in modes:
        util, mem = gpu(f"{policy}-{mode}")
        if mode not in res:
            print(f"{policy:8s} {mode:13s} {'(no result)':>7s}")
            continue
        m = res[mode]["modes"][mode]
        rate = f"{(steps or res[mode]['env_steps']) / m['wall_s']:11.1f}"
        ratio = f"{le['wall_s'] / m['wall_s']:.2f}x" if le and mode != "lerobot-eval" else "-"
        print(f"{policy:8s} {mode:13s} {m['wall_s']:7.1f} {rate} {fmt(m['rows_per_call'], '.2f'):>9s} "
              f"{fmt(m['rows_per_net_call'], '.2f'):>8s} {ratio:>14s} {fmt(util, '.1f'):>10s} {fmt(mem, 'd'):>8s}")
print("x lerobot-eval: lerobot-eval's wall / this run's (same policy, same episodes); GPU util: mean of the run's "
      "500 ms samples, start-up included")
EOF
if compgen -G "$OUT/*.failed" >/dev/null || compgen -G "$OUT/*.skipped" >/dev/null; then
    exit 1  # the table above names what is missing
fi
