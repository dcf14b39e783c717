#!/usr/bin/env bash
# The packages bench/gpu.sh needs on the GPU machine beyond what its python3 has, downloaded
# here (that machine reaches no network): wheels for CPython 3.12 on manylinux x86_64 into .whl/,
# EGL's Debian packages into .gl/. Both are git-ignored and travel with `run`'s carry.
#
#     bash bench/gpu_prepare.sh      # prints the list and the total; exit 1 past 60 MiB
#
# The GPU machine's python3 (3.12.3) holds torch 2.11.0, torchvision 0.26.0, transformers 5.17.0,
# numpy 2.5.2, huggingface_hub 1.33.0, pyarrow, opencv-python-headless, peft (with accelerate),
# timm, scipy, matplotlib and what they require (bench/gpu_mimic.sh builds the same here). What
# the benchmark adds, found by importing and running its whole path (rollbench continuous and
# lockstep, lerobot-eval 0.6.1, SmolVLA and ACT, MetaWorld pixels, EGL) in that environment with
# nothing else (`bash bench/gpu.sh --dry-run`):
# - rollbench, built from this working tree;
# - lerobot 0.6.1 and what its env, policy and eval modules import: draccus (mergedeep,
#   typing-inspect, mypy-extensions), einops, requests (urllib3, charset-normalizer), termcolor,
#   num2words (SmolVLM's processor imports it);
# - metaworld 3.0.0 (lerobot 0.6.1's pin) and what it imports: mujoco 3.3.0, gymnasium 1.4.0
#   (cloudpickle, farama-notifications), imageio, glfw; PyOpenGL for MuJoCo's EGL context.
# Left out, not imported on this path: mujoco's absl-py and etils, num2words's docopt (its
# command line only), lerobot's cmake. lerobot-eval imports LeRobotDataset at module level,
# which requires HF datasets, pandas and PyAV (~55 MB of wheels, with MetaWorld's 36 MB past the
# limit) and is used only by `--eval.recording`: bench/vs_lerobot.py's
# --lerobot-eval-without-datasets gives lerobot-eval a stand-in for it instead, and no mode
# writes videos.
# Versions: constraints/lerobot06.txt's where it pins the package, else the ones tried here.
set -euo pipefail

cd "$(dirname "$0")/.." || exit 1
LIMIT_MIB=60  # `run` carries 64 MiB with the tracked tree (~2 MiB)
PYTHON=${PYTHON:-python3}
WHEELS=(lerobot metaworld mujoco gymnasium draccus num2words  # pinned by constraints/lerobot06.txt
    mergedeep==1.3.4 typing-inspect==0.9.0 mypy-extensions==1.2.0 einops==0.8.2 requests==2.34.2
    urllib3==2.8.0 charset-normalizer==3.5.3 termcolor==3.3.0 cloudpickle==3.1.3
    farama-notifications==0.0.6 imageio==2.38.2 glfw==2.11.0 pyopengl==3.1.10)
DEBS=(libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 libvulkan1)

die() {
    echo "bench/gpu_prepare.sh: $*" >&2
    exit 1
}

# Run quietly; on failure, one line: what failed and the last line it printed.
quiet() {
    local what=$1 log
    shift
    log=$(timeout 600 "$@" </dev/null 2>&1) && return 0
    die "$what failed: $(printf '%s\n' "$log" | grep -v -e '^\s*$' -e '^WARNING: Location' | tail -n 1)"
}

command -v "$PYTHON" >/dev/null || die "no Python at '$PYTHON': set PYTHON to an interpreter with pip"
rm -rf .whl .gl
mkdir -p .whl .gl
quiet "building rollbench's wheel" "$PYTHON" -m pip wheel -q --no-deps -w .whl .
quiet "downloading the wheels" "$PYTHON" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any -c constraints/lerobot06.txt -d .whl "${WHEELS[@]}"

# EGL's user-space libraries (glvnd; the NVIDIA driver brings its own vendor library), for amd64
# whatever this machine is; apt's lists go to a scratch directory, not the system's.
lists=${TMPDIR:-/tmp}/rollbench-gpu-apt
mkdir -p "$lists/partial"
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
quiet "apt-get update" apt-get "${apt_opts[@]}" update
(cd .gl && quiet "apt-get download" apt-get "${apt_opts[@]}" download "${DEBS[@]}")

# One version of each: a second one would mean two resolutions of the same name.
dupes=$(find .whl -name '*.whl' -printf '%f\n' | cut -d- -f1 | tr '[:upper:]-' '[:lower:]_' | sort | uniq -d)
[ -z "$dupes" ] || die "more than one wheel of: $dupes"

total=$(find .whl .gl -type f -printf '%s\n' | awk '{s += $1} END {print s}')
largest=$(find .whl .gl -type f -printf '%s %p\n' | sort -rn | head -n 1 | awk '{printf "%s (%.1f MiB)", $2, $1 / 1048576}')
count=$(find .whl .gl -type f | wc -l)
if ((total > LIMIT_MIB * 1048576)); then
    die "$(awk -v t="$total" 'BEGIN {printf "%.1f", t / 1048576}') MiB in .whl/ and .gl/ passes the ${LIMIT_MIB} MiB limit; largest: $largest"
fi
find .whl .gl -type f -printf '%s %p\n' | sort -rn | awk '{printf "%8.2f MiB  %s\n", $1 / 1048576, $2}'
awk -v t="$total" -v n="$count" -v l="$LIMIT_MIB" 'BEGIN {printf "total: %.1f MiB in %d files (limit %d MiB)\n", t / 1048576, n, l}'
