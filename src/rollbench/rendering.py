"""Rendering backends: which MUJOCO_GL a process uses, and what to say when it fails.

`--render_device=gpu` -> EGL (on the GPU's driver); `cpu` -> OSMesa when libOSMesa loads
(measured here ~15% faster than Mesa's llvmpipe through EGL), else EGL on Mesa; `auto` ->
EGL when nvidia-smi sees a GPU, else the cpu choice. A MUJOCO_GL the user set wins under
`auto`, in every way of running. A process whose PyOpenGL is loaded already keeps that
platform (`loaded_backend`), so the choice is then the backend it was loaded for. The
executor decides once per run (`choose_backend`) and carries the value explicitly: into the
driver's environment (`apply_backend`), each worker's spec, and each local shard's
environment. The GL context itself is created in
the worker, on the first render. A MUJOCO_GL the user set is checked before anything
imports MuJoCo (`check_user_backend`), which reads it once, at that import, and fails there.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollbench.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from rollbench.config.env import BenchmarkConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gpu:
    index: int
    free_mib: int | None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,memory.free --format=csv,noheader,nounits` -> GPUs."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts or not parts[0].isdigit():
            continue
        free = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        gpus.append(Gpu(int(parts[0]), free))
    return gpus


def find_gpus() -> list[Gpu]:
    """The GPUs nvidia-smi sees (none when it is missing or fails), restricted to
    $CUDA_VISIBLE_DEVICES when that lists indices."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=15, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    gpus = parse_nvidia_smi(proc.stdout)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(p.strip().isdigit() for p in visible.split(",") if p.strip()):
        allowed = [int(p) for p in visible.split(",") if p.strip()]
        gpus = [g for g in gpus if g.index in allowed]
    return gpus


def library_loads(name: str) -> bool:
    """Whether lib`name` loads as PyOpenGL loads it (its `ctypesloader`): by file name,
    lib`name`.so, then .so.9 down to .so.0, through the dynamic loader, so $LD_LIBRARY_PATH
    counts as it does for PyOpenGL (ctypes.util.find_library ignores it, and may name a
    file PyOpenGL would not try)."""
    base = f"lib{name}.so"
    for path in (base, *(f"{base}.{i}" for i in range(9, -1, -1))):
        try:
            ctypes.CDLL(path)
            return True
        except OSError:
            continue
    return False


def osmesa_loadable() -> bool:
    return library_loads("OSMesa")


# PyOpenGL's platform modules -> the backend that works beside them
_PYOPENGL_PLATFORMS = {"OpenGL.platform.egl": "egl", "OpenGL.platform.osmesa": "osmesa"}


def loaded_backend() -> str | None:
    """The backend this process is already bound to: PyOpenGL fixes its platform (EGL,
    OSMesa, GLX) at its first import, from $PYOPENGL_PLATFORM (importing MuJoCo with
    MUJOCO_GL=egl or osmesa imports it), and any other backend's context then fails
    ("'EGLPlatform' object has no attribute 'OSMesa'"). egl or osmesa once PyOpenGL is
    loaded on that platform; None when it is not loaded yet (or loaded on another)."""
    module = sys.modules.get("OpenGL.platform")
    platform = getattr(module, "PLATFORM", None)
    return _PYOPENGL_PLATFORMS.get(type(platform).__module__) if platform is not None else None


def _device_backend(render_device: str, gpus: Sequence[Gpu]) -> str:
    """MUJOCO_GL for `--render_device`: gpu -> egl; cpu -> osmesa if loadable, else egl;
    auto -> egl when a GPU is visible, else the cpu choice."""
    if render_device == "gpu" or (render_device == "auto" and gpus):
        return "egl"
    return "osmesa" if osmesa_loadable() else "egl"


def assign_gpus(gpus: Sequence[Gpu], num_shards: int) -> list[Gpu | None]:
    """Shard K -> a GPU, round-robin, the one with the most free memory first.

    With fewer than two GPUs nothing is assigned: every child sees what the parent sees.
    """
    if len(gpus) < 2:
        return [None] * num_shards
    order = sorted(gpus, key=lambda g: (-(g.free_mib or 0), g.index))
    return [order[k % len(order)] for k in range(num_shards)]


# What apply_backend last wrote, and the MUJOCO_GL that was there before rollbench first
# wrote one: the user's choice must keep winning after this process has set its own (tests
# and embedding programs run several evaluations in one process).
_ours: list[str | None] = [None, None]  # [value we set, the user's value before it]


def user_backend() -> str | None:
    """The MUJOCO_GL the user set, if any (not one this process set itself): the value there
    now, unless it is the one rollbench last wrote, which stands for the user's before it. A
    value gone since is the user's too (unset: none), not a reason to keep an earlier one."""
    current = os.environ.get("MUJOCO_GL") or None
    if current != _ours[0]:
        return current
    return _ours[1]


def choose_backend(render_device: str, gpus: Sequence[Gpu] | None = None) -> str:
    """The MUJOCO_GL value a run uses: the one decision, made once per run by its executor.

    Under `--render_device=auto` a MUJOCO_GL the user set wins (`check_user_backend`
    refuses one this process cannot use); otherwise the backend this process's PyOpenGL is
    already bound to (`loaded_backend`: tests and programs that run several evaluations in
    one process), else the device rule (`_device_backend`). `gpus`: what `find_gpus()`
    returned, when the caller has it already.
    """
    if render_device == "auto" and (user := user_backend()):
        return user
    if (loaded := loaded_backend()) is not None:
        if render_device == "gpu" and loaded != "egl":
            log.warning("--render_device=gpu: this process has loaded PyOpenGL for %s already, and it cannot change; "
                        "rendering with %s, on the CPU", loaded, loaded)
        return loaded
    if gpus is None:
        gpus = find_gpus() if render_device == "auto" else []
    return _device_backend(render_device, gpus)


BACKENDS = ("egl", "osmesa", "glfw")  # rollbench's: the GL context of a video frame is one of these
_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}  # the library PyOpenGL loads for each (glfw: a display)
# MUJOCO_GL as MuJoCo takes it on Linux (mujoco/gl_context.py, in any case): a backend, or a word
# for its default (glfw) or for none; dm_control (ALOHA) takes the same in lower case, but not glx
_MUJOCO_GL_WORDS: tuple[str, ...] = (*BACKENDS, "glx", "on", "enable", "enabled", "true", "1", "off", "disable", "disabled", "false", "0")
_GLFW_WORDS = ("glfw", "glx", "on", "enable", "enabled", "true", "1")  # MuJoCo's glfw context (its default)


def has_display() -> bool:
    """Whether glfw has a display to open (X11 or Wayland)."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def working_backends() -> list[str]:
    """The backends that can work here: egl and osmesa when their library loads, glfw when
    there is a display."""
    return [b for b in BACKENDS if (library_loads(_LIBRARIES[b]) if b in _LIBRARIES else has_display())]


def _what_works(value: str) -> str:
    """`set MUJOCO_GL=egl (found on this machine)`: the other backends that can work here."""
    others = [b for b in working_backends() if b != value]
    if not others:
        return f"no other backend is found on this machine either (egl needs {_PACKAGES['egl']}, glfw a display)"
    return "set " + " or ".join(f"MUJOCO_GL={b}" for b in others) + " (found on this machine)"


def check_user_backend(bench: BenchmarkConfig, films: int = 0) -> None:
    """Refuse, as a ConfigError, a MUJOCO_GL the user set that MuJoCo cannot start with, when
    `bench` runs MuJoCo (it names "mujoco" among its required modules): MuJoCo and dm_control
    read MUJOCO_GL once, at their first import, and fail there, before any render, saying
    "'NoneType' object has no attribute 'glGetError'" (libOSMesa missing) or "invalid value".
    glfw with no display is refused for a run that renders: one whose observations are camera
    images (`bench.renders_obs`), or that films (`films`: the episodes per task it films,
    --eval.max_episodes_rendered); MuJoCo's first render fails there, and the worker aborts in
    its next, every episode (measured here). A benchmark without MuJoCo runs under any value."""
    user = user_backend()
    needs = bench.required_modules()
    if user is None or "mujoco" not in needs:
        return
    value, takes = user.lower().strip(), _MUJOCO_GL_WORDS
    if "dm_control" in needs:  # which reads the value as it is
        value, takes = user, tuple(w for w in takes if w != "glx")
    if value not in takes:
        works = ", ".join(working_backends()) or "none"
        raise ConfigError(
            f"MUJOCO_GL={user!r} is not a rendering backend.{did_you_mean(value.lower(), BACKENDS)} Allowed: egl, "
            f"osmesa (with libOSMesa installed), glfw (with a display); found on this machine: {works}; or unset MUJOCO_GL to "
            f"let rollbench choose"
        )
    if value.lower() == "osmesa":  # before anything loads OSMesa: this check (`_check_library`), the tasks' listing
        triton_before_osmesa()
    _check_display(user, value, bench, films)
    _check_library(user, value)


def _check_display(user: str, value: str, bench: BenchmarkConfig, films: int) -> None:
    """Refuse, as a ConfigError, MUJOCO_GL=`user` (`value`: as MuJoCo reads it) when it means
    glfw, no display is set, and the run renders (its observations, or `films` videos)."""
    if value.lower() in _GLFW_WORDS and not has_display() and (films or bench.renders_obs):
        if bench.renders_obs:  # filming nothing would not help
            cameras = ", ".join(k for k, ft in bench.features.items() if ft.type == "VISUAL")
            why = f"this run renders its observations ({cameras}, a camera image every step): {_what_works('glfw')}"
        else:
            why = (f"this run films videos (--eval.max_episodes_rendered={films}): {_what_works('glfw')}, film nothing "
                   f"with --eval.max_episodes_rendered=0")
        raise ConfigError(
            f"MUJOCO_GL={user}{'' if value.lower() == 'glfw' else ' (glfw, MuJoCo default)'} needs a display, and none "
            f"is set (DISPLAY, WAYLAND_DISPLAY); {why}, or unset MUJOCO_GL to let rollbench choose"
        )


def _check_library(user: str, value: str) -> None:
    """Refuse, as a ConfigError, MUJOCO_GL=`user` (`value`: as MuJoCo reads it) when this process
    has loaded PyOpenGL for another platform already, or the library it needs is not installed."""
    loaded = loaded_backend()
    if loaded is not None and value.lower() in _LIBRARIES and value.lower() != loaded:
        raise ConfigError(
            f"MUJOCO_GL={user}: this process has loaded PyOpenGL for {loaded} already, and PyOpenGL keeps the platform "
            f"of its first import; set MUJOCO_GL={loaded}, or run rollbench in a new process"
        )
    lib = _LIBRARIES.get(value)
    if lib is not None and not library_loads(lib):
        raise ConfigError(
            f"MUJOCO_GL={user}: {lib}'s library (lib{lib}.so) is not installed on this machine; install it "
            f"(Debian/Ubuntu: apt-get install -y {_PACKAGES[value]}), {_what_works(value)}, "
            f"or unset MUJOCO_GL to let rollbench choose"
        )


def apply_backend(backend: str) -> None:
    """Set the variables MuJoCo (MUJOCO_GL) and PyOpenGL/robosuite (PYOPENGL_PLATFORM) read."""
    current = os.environ.get("MUJOCO_GL") or None
    if current != _ours[0]:
        _ours[1] = current  # set by someone else since (or before) rollbench set it
    os.environ["MUJOCO_GL"] = backend
    os.environ["PYOPENGL_PLATFORM"] = backend
    _ours[0] = backend
    if backend == "osmesa":
        triton_before_osmesa()


def triton_before_osmesa() -> None:
    """Load triton (torch's kernel compiler, where installed) before MuJoCo loads OSMesa.

    Both carry an LLVM: Mesa's llvmpipe (libLLVM, loaded with libOSMesa when MuJoCo is
    imported under MUJOCO_GL=osmesa) and triton's own. Loaded in that order, triton's import
    kills the process with SIGSEGV, and torch imports it the first time anything touches
    torch._dynamo (torchvision.ops, LeRobot's policies and dataset writer): a recorded
    MetaWorld run under osmesa died at its first dataset part, a LeRobot policy would at its
    load. Loaded first, triton and OSMesa both work (tests/test_backends.py). 0.13 s, only in
    a process that renders with OSMesa and has triton installed."""
    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    if _osmesa_loaded():
        log.debug("OSMesa was loaded before triton: importing torch._dynamo may crash this process")
        return
    # heavy: loaded for its LLVM (see above), and only here
    import triton  # noqa: F401


def _osmesa_loaded() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "libOSMesa" in maps.read()
    except OSError:  # not Linux: no such crash known there
        return False


_PACKAGES = {
    "egl": "libegl1 libgl1 libegl-mesa0",
    "osmesa": "libosmesa6",
}
_GL_MARKERS = ("egl", "osmesa", "opengl", "glfw", "gladload", "gl context", "libgl")


def gl_failure_hint(error_text: str, backend: str) -> str:
    """A sentence naming the backend and the system package, if `error_text` is a GL failure."""
    low = error_text.lower()
    if not any(marker in low for marker in _GL_MARKERS):
        return ""
    if backend == "glfw":
        return (
            "rendering with MUJOCO_GL=glfw failed to create a context: glfw needs a display (X11); "
            "headless, unset MUJOCO_GL (rollbench then picks egl or osmesa) or set it to egl or osmesa"
        )
    pkg = _PACKAGES.get(backend, "the OpenGL libraries")
    other = "cpu" if backend == "egl" else "gpu"
    return (
        f"rendering with MUJOCO_GL={backend} failed to create a context: install {pkg} "
        f"(Debian/Ubuntu: apt-get install -y {pkg.split(' (')[0]}) or try --render_device={other}"
    )
