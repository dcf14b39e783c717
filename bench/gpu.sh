#!/usr/bin/env bash
# rollbench continuous vs lockstep vs lerobot-eval on one GPU machine (an H200, 16 cores), with
# the GPU's utilisation during each run; made to run first time on that machine as it is (a
# python3 with torch and no LeRobot, MuJoCo or MetaWorld; no network).
#
#     bash bench/gpu_prepare.sh      # here: the wheels into .whl/, EGL's .debs into .gl/
#     bash bench/gpu.sh              # there, with .whl and .gl carried; results in $OUT
#     bash bench/gpu.sh --dry-run    # here: the same steps on CPU, shortened (bench/gpu_mimic.sh first)
#
# Steps: (1) nvidia-smi sees a GPU (checked before anything is unpacked), then the install: EGL's
# .debs unpacked into / (`dpkg -x`, then ldconfig), the wheels into $SITE with `pip install
# --no-index --no-deps --target`, which goes first on PYTHONPATH (its bin/ on PATH); (2) the other
# preconditions, one line each, stopping at the first that fails: the Python environment imports,
# CUDA runs, EGL renders on the NVIDIA GPU; (3) the tiny random-init SmolVLA and ACT checkpoints,
# built offline once each (bench/vs_lerobot.py --save-checkpoint: the tests' helpers); (4) per
# policy, one `bench/vs_lerobot.py --modes <mode>` per mode (its docstring says what is measured)
# under `timeout`, with `nvidia-smi` sampling the GPU every 500 ms beside it: MetaWorld MT10 pixels
# (480x480, 2 episodes per task, 50 steps), rendered with EGL, the policy on cuda, rollbench with
# 16 workers, no videos (PyAV is not carried: see bench/gpu_prepare.sh), lerobot-eval 0.6.1 with a
# stand-in for `lerobot.datasets` (vs_lerobot.py --lerobot-eval-without-datasets); (5) the table
# and summary.json in $OUT. The whole script stays within 9 minutes: each run's limit is cut to
# what is left, and a run that no longer fits is skipped and named.
#
# --dry-run: the same steps here, on CPU, in the environment bench/gpu_mimic.sh builds (what the
# GPU machine's python3 holds, nothing more): the .debs unpacked into a scratch root instead of /
# (on LD_LIBRARY_PATH, so rendering goes through them), the same wheels into a scratch $SITE,
# nvidia-smi, CUDA and EGL checks skipped, every mode shortened (2 tasks, 1 episode of 5 steps,
# 2 workers), rendering with EGL on this machine's Mesa.
#
# Environment: PYTHON (default .venv/bin/python, else python3; --dry-run: $MIMIC/bin/python,
# MIMIC=/tmp/gpu-mimic), OUT (./gpu_bench_out), SITE (/tmp/site), WORKERS (16), POLICIES
# ("smolvla act"), TASKS (10), EPISODES (2), EPISODE_LENGTH (50), RUN_LIMIT_S (120: a rollbench
# run's limit), LEROBOT_EVAL_LIMIT_S (180: lerobot-eval's; on 2 CPU cores it took ~10 min for
# SmolVLA with videos).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
die() {
    echo "bench/gpu.sh: $*" >&2
    exit 1
}

DRY=0
for arg in "$@"; do
    case $arg in
        --dry-run) DRY=1 ;;
        *) die "unknown argument '$arg'; allowed: --dry-run (and the environment variables in the header)" ;;
    esac
done

BUDGET_S=540 # 9 minutes from the start, install included; the summary takes a second
SCRATCH=${TMPDIR:-/tmp}/rollbench-gpu
if ((DRY)); then
    MIMIC=${MIMIC:-/tmp/gpu-mimic}
    PYTHON=${PYTHON:-$MIMIC/bin/python}
    [ -x "$PYTHON" ] || die "no Python at $PYTHON: build the GPU machine's stand-in with \`bash bench/gpu_mimic.sh\` (or set MIMIC or PYTHON)"
    SCRATCH=$SCRATCH-dry
    SITE=${SITE:-$SCRATCH/site}
    WORKERS=${WORKERS:-2} TASKS=${TASKS:-2} EPISODES=${EPISODES:-1} EPISODE_LENGTH=${EPISODE_LENGTH:-5}
    DEVICE=cpu
else
    PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
    SITE=${SITE:-/tmp/site}
    DEVICE=cuda
fi
export MUJOCO_GL=egl # the dry run too: through the carried glvnd libraries (to Mesa there)
RUN_LIMIT_S=${RUN_LIMIT_S:-120}
LEROBOT_EVAL_LIMIT_S=${LEROBOT_EVAL_LIMIT_S:-180}
WORKERS=${WORKERS:-16}
POLICIES=${POLICIES:-"smolvla act"}
TASKS=${TASKS:-10}
EPISODES=${EPISODES:-2}
EPISODE_LENGTH=${EPISODE_LENGTH:-50}
MODES=(continuous lockstep lerobot-eval)
OUT=${OUT:-./gpu_bench_out}
# offline, with empty caches: nothing a cache here holds can help the dry run that the GPU machine lacks
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=$SCRATCH/hf-home TORCH_HOME=$SCRATCH/torch-home
command -v "$PYTHON" >/dev/null || die "no Python at $PYTHON: set PYTHON to the interpreter to run with"

# One line from a Python check: its message (printed by it) or the last line of what it raised.
check() {
    local what=$1 limit=$2 code=$3 msg
    msg=$(timeout -k 5 "$limit" "$PYTHON" -c "$code" </dev/null 2>&1) && { echo "check $what: ok"; return 0; }
    die "$what: $(printf '%s\n' "$msg" | grep -v '^\s*$' | tail -n 1)"
}

skip() {
    echo "check $1: skipped (dry run)"
}

# --- 1. install (after the one check that needs nothing installed: no GPU, nothing unpacked) ---
if ((DRY)); then
    skip nvidia-smi
else
    command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs a machine with an NVIDIA GPU and its driver"
    timeout 30 nvidia-smi -L </dev/null >/dev/null 2>&1 || die "nvidia-smi sees no GPU ($(timeout 30 nvidia-smi -L 2>&1 | head -n 1))"
    echo "check nvidia-smi: ok"
fi
rm -rf "$HF_HOME" "$TORCH_HOME"
if compgen -G ".gl/*.deb" >/dev/null; then
    # Into / where we may write (the GPU machine), else into a scratch root found through
    # LD_LIBRARY_PATH: the dry run renders through the carried glvnd libraries and this machine's
    # Mesa, and leaves its system alone.
    root=/
    if ((DRY)) || [ ! -w /usr/lib ]; then
        root=$SCRATCH/gl-root
        rm -rf "$root" && mkdir -p "$root" || die "cannot create $root"
    fi
    for deb in .gl/*.deb; do
        dpkg -x "$deb" "$root" 2>/dev/null || die "dpkg -x $deb $root failed: unpacking EGL's packages needs dpkg and write access to $root"
    done
    libs=$root/usr/lib/x86_64-linux-gnu
    [ -e "$libs/libEGL.so.1" ] || die ".gl/ unpacked no $libs/libEGL.so.1: rerun bench/gpu_prepare.sh"
    if [ "$root" = / ]; then
        ldconfig 2>/dev/null || true
    else
        # PyOpenGL asks for libEGL.so before libEGL.so.1: without these links a system's dev
        # links (this machine's) would win over LD_LIBRARY_PATH
        for lib in "$libs"/lib*.so.[0-9]; do
            ln -sf "$(basename "$lib")" "${lib%.so.*}.so"
        done
        export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    echo "install: $(ls .gl/*.deb | wc -l) EGL packages unpacked into $root"
elif ((DRY)); then
    die "no .gl/*.deb: run \`bash bench/gpu_prepare.sh\` first"
fi
# The NVIDIA driver's EGL vendor file, where glvnd does not look by itself (the brief of the
# machine: "if no driver found").
nvidia_vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if ((!DRY)) && [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -e "$nvidia_vendor" ] &&
    ! compgen -G "/usr/share/glvnd/egl_vendor.d/*nvidia*" >/dev/null && ! compgen -G "/etc/glvnd/egl_vendor.d/*nvidia*" >/dev/null; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=$nvidia_vendor
fi

if compgen -G ".whl/*.whl" >/dev/null; then
    rm -rf "$SITE"
    msg=$(timeout -k 5 300 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl </dev/null 2>&1) ||
        die "pip install --target $SITE .whl/*.whl failed: $(printf '%s\n' "$msg" | grep -v '^\s*$' | tail -n 1)"
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH
    echo "install: $(ls .whl/*.whl | wc -l) wheels into $SITE ($((SECONDS)) s so far)"
elif ((DRY)); then
    die "no .whl/*.whl: run \`bash bench/gpu_prepare.sh\` first"
else
    echo "install: no .whl/ here, so $PYTHON's environment is used as it is"
fi

# --- 2. preconditions ------------------------------------------------------------------------
check "Python environment" 120 "
import sys
if sys.version_info[:2] != (3, 12):
    raise SystemExit('Python ' + sys.version.split()[0] + ' at ' + sys.executable + ': the wheels in .whl/ are for 3.12')
import rollbench, lerobot, metaworld, num2words, torch"
# EGL: a MuJoCo context, and the renderer it got (the dry run takes any, and says which)
egl_check="
import os, mujoco
ctx = mujoco.GLContext(64, 64)
ctx.make_current()
from OpenGL import GL
renderer = GL.glGetString(GL.GL_RENDERER).decode()
ctx.free()
if os.environ.get('GPU_SH_DRY') != '1' and 'nvidia' not in renderer.lower():
    raise SystemExit('EGL renders on ' + repr(renderer) + ', not the NVIDIA GPU (is libEGL_nvidia installed?)')
print(renderer)"
if ((DRY)); then
    skip CUDA
    renderer=$(GPU_SH_DRY=1 timeout -k 5 60 "$PYTHON" -c "$egl_check" </dev/null 2>/dev/null | tail -n 1)
    echo "check EGL (MUJOCO_GL=egl): skipped (dry run); here it renders on ${renderer:-nothing (no EGL context)}"
else
    check CUDA 120 "
import torch
if not torch.cuda.is_available():
    raise SystemExit('torch.cuda.is_available() is False (torch ' + torch.__version__ + ', built for CUDA ' + str(torch.version.cuda) + ')')
torch.ones(8, device='cuda').sum().item()"
    check "EGL (MUJOCO_GL=egl)" 60 "$egl_check"
fi

mkdir -p "$OUT" || die "cannot create $OUT"
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/*.gpu.csv "$OUT"/*.failed "$OUT"/*.skipped "$OUT"/summary.txt
{
    ((DRY)) && echo "dry run: CPU, $PYTHON" || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$PYTHON" -c "import sys, torch, lerobot, rollbench; print('python', sys.version.split()[0], '| torch', torch.__version__, 'cuda', torch.version.cuda, '| lerobot', lerobot.__version__, '| rollbench from', rollbench.__file__)"
    echo "cores $(nproc), workers $WORKERS, MUJOCO_GL=$MUJOCO_GL, EGL vendor files ${__EGL_VENDOR_LIBRARY_FILENAMES:-(glvnd default)}, LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "workload: MetaWorld MT10 pixels, first $TASKS task(s) x $EPISODES episode(s) x $EPISODE_LENGTH steps, policy device $DEVICE, no videos"
} >"$OUT/machine.txt" 2>&1

# --- 3. checkpoints --------------------------------------------------------------------------
rm -rf "$SCRATCH/ckpt"
for policy in $POLICIES; do
    start=$SECONDS
    log=$(timeout -k 5 180 "$PYTHON" bench/vs_lerobot.py --workload mt10 --policy "$policy" \
        --save-checkpoint "$SCRATCH/ckpt/$policy" </dev/null 2>&1) ||
        die "building the tiny $policy checkpoint failed: $(printf '%s\n' "$log" | grep -v '^\s*$' | tail -n 1)"
    echo "checkpoint $policy: built in $((SECONDS - start)) s"
done

# --- 4. the runs -----------------------------------------------------------------------------
batch=$((EPISODES < 2 ? EPISODES : 2))
for policy in $POLICIES; do
    for mode in "${MODES[@]}"; do
        tag="$policy-$mode"
        cap=$RUN_LIMIT_S
        [ "$mode" = lerobot-eval ] && cap=$LEROBOT_EVAL_LIMIT_S
        limit=$((BUDGET_S - SECONDS))
        ((limit > cap)) && limit=$cap
        if ((limit < 45)); then
            echo "$tag: skipped, ${limit}s left of the 9-minute budget" | tee "$OUT/$tag.skipped"
            continue
        fi
        smi=
        if ((!DRY)); then
            nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv -lms 500 >"$OUT/$tag.gpu.csv" 2>/dev/null &
            smi=$!
        fi
        start=$SECONDS
        timeout -k 10 "$limit" "$PYTHON" bench/vs_lerobot.py --workload mt10 --policy "$policy" --modes "$mode" \
            --checkpoint "$SCRATCH/ckpt/$policy" --device "$DEVICE" --workers "$WORKERS" --repeats 1 \
            --tasks "$TASKS" --episodes "$EPISODES" --episode-length "$EPISODE_LENGTH" --batch-size "$batch" \
            --no-videos --lerobot-eval-without-datasets --json "$OUT/$tag.json" </dev/null >"$OUT/$tag.log" 2>&1
        rc=$?
        if [ -n "$smi" ]; then
            kill "$smi" 2>/dev/null
            wait "$smi" 2>/dev/null
        fi
        case $rc in
            0) echo "$tag: done in $((SECONDS - start)) s" ;;
            124 | 137) echo "$tag: timed out after ${limit}s (log: $OUT/$tag.log)" | tee "$OUT/$tag.failed" ;;
            *) echo "$tag: failed ($rc): $(grep -v '^\s*$' "$OUT/$tag.log" | tail -n 1)" | tee "$OUT/$tag.failed" ;;
        esac
    done
done

# --- 5. the table and summary.json -----------------------------------------------------------
# Each run's figures from its JSON, ratios against the same policy's lerobot-eval run, the GPU's
# mean utilisation and peak memory over the run's samples.
"$PYTHON" - "$OUT" "$DRY" $POLICIES <<'EOF' | tee "$OUT/summary.txt"
import json
import statistics
import sys
from pathlib import Path

out, dry, policies = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
modes = ("continuous", "lockstep", "lerobot-eval")


def gpu(tag):
    path = out / f"{tag}.gpu.csv"
    util, mem = [], []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            u, m = (int(x.split()[0]) for x in line.split(","))
        except (ValueError, IndexError):
            continue  # the header, [N/A] or a half-written line
        util.append(u)
        mem.append(m)
    return (statistics.mean(util), max(mem)) if util else (None, None)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


rows = []
for policy in policies:
    res = {m: json.loads((out / f"{policy}-{m}.json").read_text()) for m in modes if (out / f"{policy}-{m}.json").exists()}
    steps = max((r["env_steps"] for r in res.values() if r["env_steps_counted"]), default=None)
    le = res.get("lerobot-eval", {}).get("modes", {}).get("lerobot-eval")
    for mode in modes:
        util, mem = gpu(f"{policy}-{mode}")
        row = {"policy": policy, "mode": mode, "result": mode in res, "gpu_util_pct": util, "gpu_mem_mib": mem}
        if mode in res:
            r, m = res[mode], res[mode]["modes"][mode]
            row.update(
                wall_s=m["wall_s"], episodes=r["tasks"] * r["episodes"],
                episodes_per_hour=r["tasks"] * r["episodes"] / m["wall_s"] * 3600,
                env_steps=steps or r["env_steps"], env_steps_per_s=(steps or r["env_steps"]) / m["wall_s"],
                rows_per_call=m["rows_per_call"], rows_per_net_call=m["rows_per_net_call"],
                x_lerobot_eval=le["wall_s"] / m["wall_s"] if le and mode != "lerobot-eval" else None,
                lerobot_eval_datasets=r.get("lerobot_eval_datasets"), device=r["device"], workers=r["workers"],
            )
        rows.append(row)

print(f"{'policy':8s} {'mode':13s} {'wall s':>7s} {'episodes/h':>10s} {'env-steps/s':>11s} {'rows/call':>9s} "
      f"{'rows/net':>8s} {'x lerobot-eval':>14s} {'GPU util %':>10s} {'GPU MiB':>8s}")
for r in rows:
    if not r["result"]:
        print(f"{r['policy']:8s} {r['mode']:13s} {'(no result)':>7s}")
        continue
    ratio = "-" if r["x_lerobot_eval"] is None else f"{r['x_lerobot_eval']:.2f}x"
    print(f"{r['policy']:8s} {r['mode']:13s} {r['wall_s']:7.1f} {r['episodes_per_hour']:10.0f} {r['env_steps_per_s']:11.1f} "
          f"{fmt(r['rows_per_call'], '.2f'):>9s} {fmt(r['rows_per_net_call'], '.2f'):>8s} {ratio:>14s} "
          f"{fmt(r['gpu_util_pct'], '.1f'):>10s} {fmt(r['gpu_mem_mib'], 'd'):>8s}")
print("x lerobot-eval: lerobot-eval's wall / this run's (same policy, same episodes); walls and episodes/h include "
      "start-up; GPU util: mean of the run's 500 ms samples" + (" (dry run: no GPU, shortened workload)" if dry else ""))
machine = (out / "machine.txt").read_text().splitlines() if (out / "machine.txt").exists() else []
(out / "summary.json").write_text(json.dumps({"dry_run": dry, "machine": machine, "runs": rows}, indent=1))
EOF
if compgen -G "$OUT/*.failed" >/dev/null || compgen -G "$OUT/*.skipped" >/dev/null; then
    exit 1 # the table above names what is missing
fi
