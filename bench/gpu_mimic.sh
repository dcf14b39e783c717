#!/usr/bin/env bash
# A Python 3.12 environment that holds what the GPU machine's `python3` holds, and nothing else,
# for `bash bench/gpu.sh --dry-run` (docs/benchmarks.md, "GPU").
#
#     bash bench/gpu_mimic.sh          # builds $MIMIC (default /tmp/gpu-mimic); ~6 GB, a download
#
# What the GPU machine has, read off it: Python 3.12.3 with torch 2.11.0 (CUDA 13.0),
# torchvision 0.26.0, transformers 5.17.0, numpy 2.5.2, huggingface_hub 1.33.0, pyarrow,
# opencv-python-headless, peft, timm, scipy, matplotlib, and what they require. No LeRobot,
# MuJoCo, gymnasium, MetaWorld or PyAV: those come from bench/gpu_prepare.sh's wheels. Every
# pin below exists on the registry; the unpinned ones take the newest, as the machine's did.
# PYTHON312 picks the interpreter (default: pyenv's 3.12.1, else python3.12).
set -euo pipefail

MIMIC=${MIMIC:-/tmp/gpu-mimic}
PYTHON312=${PYTHON312:-$([ -x ~/.pyenv/versions/3.12.1/bin/python ] && echo ~/.pyenv/versions/3.12.1/bin/python || echo python3.12)}
PACKAGES=(torch==2.11.0 torchvision==0.26.0 transformers==5.17.0 numpy==2.5.2 huggingface_hub==1.33.0
    pyarrow opencv-python-headless peft timm scipy matplotlib)

die() {
    echo "bench/gpu_mimic.sh: $*" >&2
    exit 1
}

command -v "$PYTHON312" >/dev/null || die "no Python 3.12 at '$PYTHON312': set PYTHON312 to a Python 3.12 interpreter"
"$PYTHON312" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' ||
    die "$PYTHON312 is Python $("$PYTHON312" -c 'import platform; print(platform.python_version())'), not 3.12"
if [ -e "$MIMIC/.complete" ]; then
    echo "$MIMIC: already built ($(cat "$MIMIC/.complete"))"
    exit 0
fi
rm -rf "$MIMIC"
"$PYTHON312" -m venv "$MIMIC"
"$MIMIC/bin/python" -m pip install -q --upgrade pip </dev/null
# --no-cache-dir: the CUDA build of torch is GBs; a second copy in pip's cache helps nobody here
"$MIMIC/bin/python" -m pip install -q --no-cache-dir "${PACKAGES[@]}" </dev/null
"$MIMIC/bin/python" -c "import torch, torchvision, transformers, numpy, huggingface_hub, pyarrow, cv2, peft, timm, scipy, matplotlib"
for absent in lerobot mujoco gymnasium metaworld av; do
    ! "$MIMIC/bin/python" -c "import $absent" 2>/dev/null || die "$MIMIC holds $absent, which the GPU machine lacks"
done
"$MIMIC/bin/python" -m pip freeze | tr '\n' ' ' >"$MIMIC/.complete"
echo "$MIMIC: built, $("$MIMIC/bin/python" -m pip list 2>/dev/null | tail -n +3 | wc -l) distributions ($(du -sh "$MIMIC" | cut -f1))"
