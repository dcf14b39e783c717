"""Every GL backend rollbench may pick keeps frames right, and the pick agrees with what the
process has loaded already (PyOpenGL keeps the platform of its first import).

A process binds to one backend, so each check runs in a new process per backend. A backend
whose library does not load here is skipped, saying so; CI installs libosmesa6 so that both
run there (.ci/run), and `make test-gl` runs the other rendering tests once more under
MUJOCO_GL=egl after the suite rendered with osmesa.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, subprocess_env
from rollbench.rendering import library_loads

LIBRARIES = {"egl": ("EGL", "libegl1 libgl1 libegl-mesa0"), "osmesa": ("OSMesa", "libosmesa6")}


def needs(backend: str) -> None:
    lib, package = LIBRARIES[backend]
    if not library_loads(lib):
        pytest.skip(f"MUJOCO_GL={backend}: lib{lib}.so does not load here (Debian: apt-get install {package}; CI has it)")


def run_python(code: str, **env: str) -> dict:
    """Run `code` in a new Python process (`env` added, MUJOCO_GL/PYOPENGL_PLATFORM unset unless
    given); it prints one JSON line last."""
    full = subprocess_env(**env)
    for key in ("MUJOCO_GL", "PYOPENGL_PLATFORM"):
        if key not in env:
            full.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env=full, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the choice agrees with the process ----------------------------------------------------
@pytest.mark.parametrize("bound", ["egl", "osmesa"])
def test_a_process_whose_pyopengl_is_bound_is_handed_that_backend(bound: str) -> None:
    """With PyOpenGL loaded for EGL, osmesa failed at MuJoCo's import ("'EGLPlatform' object has
    no attribute 'OSMesa'"; 19 tests of `make test` with libosmesa6 installed), and the reverse.
    Every device rule here would pick the other backend; the process's platform wins, and a
    user's MUJOCO_GL that names the other one is refused in one line."""
    pytest.importorskip("OpenGL")
    seen = run_python(f"""
        import json, os
        os.environ["PYOPENGL_PLATFORM"] = "{bound}"
        import OpenGL.platform  # binds this process
        del os.environ["PYOPENGL_PLATFORM"]
        from types import SimpleNamespace
        from rollbench import rendering
        from rollbench.errors import ConfigError
        rendering.osmesa_loadable = lambda: True  # a machine with libOSMesa: cpu would pick osmesa
        rendering.find_gpus = lambda: [rendering.Gpu(0, 1000)]  # and a GPU: auto would pick egl
        other = "osmesa" if "{bound}" == "egl" else "egl"
        chosen = {{d: rendering.choose_backend(d) for d in ("auto", "cpu", "gpu")}}
        os.environ["MUJOCO_GL"] = other
        bench = SimpleNamespace(required_modules=lambda: {{"mujoco": "mujoco"}}, renders_obs=False)
        try:
            rendering.check_user_backend(bench)
            refused = ""
        except ConfigError as err:
            refused = str(err)
        print(json.dumps({{"chosen": chosen, "refused": refused}}))
    """)
    assert seen["chosen"] == {"auto": bound, "cpu": bound, "gpu": bound}
    assert f"loaded PyOpenGL for {bound} already" in seen["refused"]
    assert "\n" not in seen["refused"]


def test_nothing_loaded_leaves_the_device_rule() -> None:
    pytest.importorskip("OpenGL")
    seen = run_python("""
        import json
        from rollbench import rendering
        rendering.osmesa_loadable = lambda: True
        print(json.dumps({"cpu": rendering.choose_backend("cpu"), "gpu": rendering.choose_backend("gpu")}))
    """)
    assert seen == {"cpu": "osmesa", "gpu": "egl"}


@pytest.mark.metaworld
@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_a_process_that_rendered_with_egl_renders_again_with_rollbenchs_choice(device: str) -> None:
    """A program (or a pytest worker: tests/conftest.py's gl_in_this_process) that rendered with
    EGL, then takes rollbench's choice for a render in the same process (as `rollbench check`
    does): with libOSMesa loadable it was handed osmesa and MuJoCo failed ("'EGLPlatform' object has no attribute 'OSMesa'"). Fails on that code only
    where libOSMesa loads (where the device rule picks osmesa)."""
    needs("egl")
    needs("osmesa")
    pytest.importorskip("metaworld")
    seen = run_python(f"""
        import json, os
        os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = "egl"
        from mujoco.egl import GLContext
        GLContext(8, 8).make_current()  # rendered with EGL once
        del os.environ["MUJOCO_GL"], os.environ["PYOPENGL_PLATFORM"]  # as a test's monkeypatch leaves them
        from rollbench.benchmarks.metaworld import MetaWorldTaskEnv
        from rollbench.rendering import apply_backend, choose_backend
        gl = choose_backend("{device}")
        apply_backend(gl)
        env = MetaWorldTaskEnv("reach-v3", "pixels_agent_pos", 32, 32, "corner2")
        obs, _ = env.reset(seed=1)
        env.close()
        print(json.dumps({{"gl": gl, "mean": float(obs["pixels"].mean())}}))
    """)
    assert seen["gl"] == "egl"
    assert seen["mean"] > 10


# -- frames stay right on every backend ----------------------------------------------------
@pytest.mark.metaworld
@pytest.mark.parametrize("late", [False, True], ids=["collected-at-close", "collected-later"])
@pytest.mark.parametrize("backend", ["egl", "osmesa"])
def test_metaworld_frames_stay_right_after_another_env_closes(backend: str, late: bool) -> None:
    """A worker closes a finished task's env while another one renders. MuJoCo freed the
    closed env's render objects when Python collected them, in the GL context current then:
    another env's, whose textures and buffers of the same ids went, and its frames came back
    black without an error. Under osmesa that was at once (its `free()` leaves the current
    context current; continuous runs differed from lockstep's); under egl when the collection
    came after the other env's next frame (a reference cycle)."""
    needs(backend)
    pytest.importorskip("metaworld")
    seen = run_python(f"""
        import gc, json
        import numpy as np
        from rollbench.benchmarks.metaworld import MetaWorldTaskEnv

        def env(task):
            e = MetaWorldTaskEnv(task, "pixels_agent_pos", 32, 32, "corner2")
            e.reset(seed=1)
            return e

        push = env("push-v3")
        before = push.render()
        reach = env("reach-v3")
        reach.render()
        push.reset(seed=1)
        push.render()  # push's context is current when reach closes, as in a worker
        kept = reach._env.mujoco_renderer.viewer if {late} else None  # collected only when dropped
        reach.close()
        del reach
        gc.collect()
        push.reset(seed=1)
        after_close = push.render()
        del kept
        gc.collect()
        push.reset(seed=1)
        after_collect = push.render()
        print(json.dumps({{"mean": float(before.mean()), "after_close": bool(np.array_equal(before, after_close)),
                          "after_collect": bool(np.array_equal(before, after_collect))}}))
    """, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    assert seen["mean"] > 10  # a picture, not a black frame
    assert seen["after_close"] and seen["after_collect"], seen


def test_torch_compilers_load_after_osmesa_renders():
    """A process that renders with OSMesa and then reaches torch._dynamo (LeRobot's dataset
    writer and policies import it through torchvision): triton's import segfaulted once
    libOSMesa (and Mesa's LLVM) was loaded, killing a recorded MetaWorld run under osmesa.
    `apply_backend("osmesa")` loads triton first (`rendering.triton_before_osmesa`)."""
    needs("osmesa")
    pytest.importorskip("triton", reason="triton (torch's kernel compiler) is not installed here")
    seen = run_python("""
        import json, os
        from rollbench.rendering import apply_backend
        apply_backend("osmesa")
        import mujoco
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/></worldbody></mujoco>")
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        renderer = mujoco.Renderer(model, 32, 32)
        renderer.update_scene(data)
        frame = renderer.render()
        loaded = "libOSMesa" in open("/proc/self/maps").read()
        import torch._dynamo  # imports triton
        print(json.dumps({"loaded": loaded, "shape": list(frame.shape)}))
    """, MUJOCO_GL="osmesa")
    assert seen == {"loaded": True, "shape": [32, 32, 3]}
