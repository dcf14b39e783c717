"""Video frames: pictures of an env's state for people; making them never changes what the policy sees.

An env may offer `render_video(size) -> HxWx3 uint8` (the `VideoFrames` protocol): a frame
whose longer side is `size` pixels, rendered as cheaply as a person can still follow the
episode. When the frame of the step is also the policy's observation (pixel observation
types) it returns that frame as it is, so a filmed pixel episode still renders once per step
and the observation keeps the policy's render settings. Envs without the method are filmed
with `render()`. Found through gymnasium's wrapper attributes (`has_wrapper_attr`), which
also reach an env inside a wrapper or an `AsyncVectorEnv` sub-process.

`MujocoVideoCamera` is the renderer for MuJoCo envs: its own MuJoCo render context (never
the env's), no multisampling, shadows or reflections, at the video's size. On Mesa's
llvmpipe a 256² MetaWorld frame costs ~11-13 ms of CPU this way against 70-150 ms at the
env's default quality.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

#: the env method that renders a video frame: `render_video(size: int) -> np.ndarray`
RENDER_VIDEO = "render_video"


class VideoFrames(Protocol):
    def render_video(self, size: int) -> np.ndarray:
        """A frame of the current state whose longer side is `size` (for a video); the
        step's observation frame as it is when the policy sees pixels."""
        ...


def films_with_render_video(env: Any) -> bool:
    """Does `env` (or an env it wraps) offer `render_video`?"""
    has = getattr(env, "has_wrapper_attr", None)  # gymnasium >= 1.0; a bare object may lack it
    return bool(has(RENDER_VIDEO)) if has is not None else hasattr(env, RENDER_VIDEO)


def video_frame(env: Any, size: int) -> np.ndarray:
    """The video frame of `env`'s current state: `render_video(size)` if it has it, else `render()`."""
    if films_with_render_video(env):
        return np.asarray(env.get_wrapper_attr(RENDER_VIDEO)(size))
    return np.asarray(env.render())


def frame_shape(size: int, width: int, height: int) -> tuple[int, int]:
    """(width, height) of a video frame: the longer side `size`, the aspect of `width` x
    `height`, both even (H.264 in yuv420p needs even sides)."""
    scale = size / max(width, height)

    def even(x: float) -> int:
        return max(2, 2 * round(x / 2))

    return even(width * scale), even(height * scale)


# -- MuJoCo ----------------------------------------------------------------------------
# One GL context per thread for every video camera in it: the first MuJoCo render context
# made in a fresh GL context costs ~0.3 s more on llvmpipe than later ones in the same GL
# context (measured here: 350-390 ms per camera with a context each, 80-200 ms shared).
# Per thread because a GL context is current in one thread at a time (lockstep runs tasks
# in threads).
_local = threading.local()
_all_contexts: list[Any] = []
_lock = threading.Lock()


def _thread_gl_context() -> Any:
    ctx = getattr(_local, "gl", None)
    if ctx is None:
        ctx = _new_gl_context()
        _local.gl = ctx
        with _lock:
            if not _all_contexts:
                # before the interpreter tears EGL down: freeing later prints EGL errors
                atexit.register(_free_all)
            _all_contexts.append(ctx)
    return ctx


def _new_gl_context() -> Any:
    # by MUJOCO_GL as it is now, as gymnasium's renderer chooses: `mujoco.gl_context` fixed
    # its class when mujoco was first imported, which in the driver (lockstep mode) is
    # before the run sets MUJOCO_GL (checking the tasks imports the simulator)
    backend = os.environ.get("MUJOCO_GL", "").lower().strip()
    if backend == "egl":
        from mujoco.egl import GLContext  # optional: mujoco, and only the backend MUJOCO_GL names now
    elif backend == "osmesa":
        # optional: mujoco, and only the backend MUJOCO_GL names now
        from mujoco.osmesa import GLContext  # type: ignore[no-redef]
    else:
        # optional: mujoco, and only the backend MUJOCO_GL names now
        from mujoco.glfw import GLContext  # type: ignore[no-redef]
    return GLContext(64, 64)  # frames go to MuJoCo's own offscreen buffer, not this one's


def _current_egl_context() -> tuple[Any, ...] | None:
    """(display, draw, read, context) current in this thread under EGL, else None."""
    if os.environ.get("MUJOCO_GL", "").lower().strip() != "egl":
        return None
    from OpenGL import EGL  # optional: PyOpenGL (comes with mujoco), EGL only

    context = EGL.eglGetCurrentContext()
    if not context:
        return None
    draw, read = EGL.eglGetCurrentSurface(EGL.EGL_DRAW), EGL.eglGetCurrentSurface(EGL.EGL_READ)
    return EGL.eglGetCurrentDisplay(), draw, read, context


@contextlib.contextmanager
def _current(ctx: Any) -> Iterator[None]:
    """Make `ctx` current for the block, then make current again what was (EGL).

    dm_control (ALOHA) remembers which of its contexts it made current in a thread and does
    not make it current again, so a frame of ours in between made its next frames come out
    of our context: garbage, no error (found by tests/test_video_frames.py).
    """
    before = _current_egl_context()
    ctx.make_current()
    try:
        yield
    finally:
        ours = getattr(getattr(ctx, "_context", None), "address", None)
        if before is not None and before[3].address != ours:
            from OpenGL import EGL  # optional: PyOpenGL (comes with mujoco), EGL only

            EGL.eglMakeCurrent(*before)


def free_render_objects(env: Any) -> None:
    """Free the MuJoCo render objects of a gymnasium MuJoCo env in its own GL context; call
    it before closing the env.

    MuJoCo's render objects (an `MjrContext`: textures, buffers) are freed when Python
    collects them, in whatever GL context is current then. After a close that is another
    env's: MuJoCo's OSMesa `free()` leaves the current context current, and under EGL one
    made current since (the next frame of another env) is; that env's objects of the same
    ids are deleted and its frames come back black, without an error (found with libOSMesa
    installed, where rollbench picks osmesa on a CPU machine).
    """
    renderer = getattr(getattr(env, "unwrapped", env), "mujoco_renderer", None)
    for viewer in list(getattr(renderer, "_viewers", {}).values()):
        con = getattr(viewer, "con", None)
        if con is not None:
            viewer.make_context_current()
            con.free()  # MjrContext's destructor frees again later: nothing is left to free then


def _free_all() -> None:
    with _lock:
        contexts, _all_contexts[:] = list(_all_contexts), []
    for ctx in contexts:
        try:
            ctx.free()
        except Exception:  # exiting: nothing left to protect
            pass


class MujocoVideoCamera:
    """A camera of a MuJoCo model rendered for videos: no multisampling, no shadows, no
    reflections, its own render context and size, so what the env renders for its policy is
    never changed.

    Multisampling and the shadow map are fixed when a render context is made (from the
    model's `vis.quality`), so they are turned off on the model only while this camera's
    context is made, then restored; shadows and reflections are turned off in this camera's
    scene only. Frames equal `mujoco.Renderer`'s with `offsamples = 0` and those two scene
    flags off.
    """

    def __init__(self, model: Any, camera: str | int, width: int, height: int) -> None:
        import mujoco  # optional: MuJoCo envs only

        self._mujoco = mujoco
        self.model = model
        self.width, self.height = width, height
        self._gl = _thread_gl_context()
        quality, buffer = model.vis.quality, model.vis.global_
        saved = (quality.offsamples, quality.shadowsize, buffer.offwidth, buffer.offheight)
        quality.offsamples, quality.shadowsize = 0, 0
        buffer.offwidth, buffer.offheight = max(buffer.offwidth, width), max(buffer.offheight, height)
        try:
            with _current(self._gl):
                # no text is ever drawn: the smallest font
                self._con: Any = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_50)
        finally:
            quality.offsamples, quality.shadowsize, buffer.offwidth, buffer.offheight = saved
        self._scene = mujoco.MjvScene(model, maxgeom=1000)
        # a reflective floor renders the scene twice: off, frames cost ~27% less (MetaWorld)
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        cam_id = camera if isinstance(camera, int) else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(f"the model has no camera {camera!r}")
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = cam_id
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._pixels = np.empty((height, width, 3), dtype=np.uint8)

    def render(self, data: Any) -> np.ndarray:
        """The camera's image of `data` (rows top to bottom), a new array."""
        mujoco = self._mujoco
        if self._con is None:
            raise RuntimeError("render() after close()")
        # another env in this thread may have made its own context current since
        with _current(self._gl):
            # and render contexts of other cameras share it: bind this one's offscreen buffer
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
            mujoco.mjv_updateScene(
                self.model, data, self._option, None, self._camera, mujoco.mjtCatBit.mjCAT_ALL, self._scene
            )
            mujoco.mjr_render(self._rect, self._scene, self._con)
            mujoco.mjr_readPixels(self._pixels, None, self._rect, self._con)
        return np.flipud(self._pixels).copy()  # OpenGL's rows run bottom to top

    def close(self) -> None:
        if self._con is not None:
            with _current(self._gl):  # free this camera's GL objects in its own context
                self._con.free()
            self._con = None
