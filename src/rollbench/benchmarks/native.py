"""Native --eval.perturb axes in a MuJoCo scene: cameras, lights and free objects moved at reset.

A benchmark's env keeps one `NativeScene`, calls `restore` before its own reset and `apply` after
its reset placement, with the condition the scheduler staged (`config.env.set_condition`) and the
reset's seed. Cameras and lights are model parameters that outlive a reset, so `restore` puts
back the values the model had at rest before the benchmark's reset computes anything from them (a
model the reset rebuilds, as robosuite's hard reset does, is at rest anyway); objects are state,
which the benchmark's next reset places again. The control (no native level) is not touched: its
reset is bit for bit what it was without a sweep, whatever ran in the env before.
Each draw comes from `perturb.reset_stream` (the episode's seed, the condition, the axis).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rollbench import perturb


def _direction(rng: np.random.Generator) -> np.ndarray:
    """A unit vector drawn uniformly on the sphere."""
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def _rotation(axis: np.ndarray, degrees: float) -> np.ndarray:
    """The unit quaternion (w, x, y, z, MuJoCo's order) of a turn by `degrees` about `axis`."""
    half = math.radians(degrees) / 2
    return np.array([math.cos(half), *(math.sin(half) * axis)])


def _mul(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The quaternion product q * r (r applied in q's frame)."""
    w1, x1, y1, z1 = q
    w2, x2, y2, z2 = r
    return np.array([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ])


#: the model arrays the native axes change, restored at every reset after a perturbed one
_MODEL_ARRAYS = ("cam_pos", "cam_quat", "light_diffuse", "light_ambient")


class NativeScene:
    """One env's MuJoCo model at rest, and the native levels of its current episode."""

    def __init__(self) -> None:
        self._model: Any = None
        self._rest: dict[str, np.ndarray] = {}
        self._headlight: tuple[np.ndarray, np.ndarray] | None = None
        self._changed = False  # the model holds a condition's cameras or lights

    def restore(self) -> None:
        """Before the benchmark's reset: the model's cameras and lights as they were at rest."""
        if not self._changed:
            return
        model = self._model
        for name, rest in self._rest.items():
            getattr(model, name)[:] = rest
        assert self._headlight is not None
        model.vis.headlight.diffuse[:], model.vis.headlight.ambient[:] = self._headlight
        self._changed = False

    def apply(self, model: Any, data: Any, cid: str, seed: int | None, cameras: Sequence[str]) -> bool:
        """After the benchmark's reset: condition `cid`'s native levels applied (to the cameras
        named `cameras`, the lights, the free objects in `data`). True when it applied any (the
        caller's observation of the reset is stale; False leaves the reset untouched)."""
        import mujoco  # optional: the simulator of the benchmarks that call this

        if model is not self._model:  # the first reset, or one that rebuilt the model: at rest
            self._model, self._changed = model, False
            self._rest = {name: getattr(model, name).copy() for name in _MODEL_ARRAYS}
            self._headlight = (model.vis.headlight.diffuse.copy(), model.vis.headlight.ambient.copy())
        levels = perturb.condition(cid).native_levels if cid else {}
        if not levels:
            return False
        seed = 0 if seed is None else int(seed)
        ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name) for name in cameras]
        if min(ids, default=0) < 0:  # -1 would move the model's last camera instead
            raise ValueError(f"the model has no camera {cameras[ids.index(-1)]!r}")
        shift, turn = levels.get("camera.shift"), levels.get("camera.rotate")
        _move_cameras(model, ids, seed, cid, shift, turn)
        factor = levels.get("light.intensity")
        if factor is not None:
            _scale_lights(model, factor)
        self._changed = bool(shift or turn or factor is not None)
        moved = levels.get("object.shift")
        objects = free_joints(model) if moved else []
        if objects:  # a scene of fixtures only (a door, a drawer) keeps its reset as it was
            angle = perturb.reset_stream(seed, cid, "object.shift").uniform(0.0, 2 * math.pi)
            offset = moved * np.array([math.cos(angle), math.sin(angle)])
            for adr in objects:
                data.qpos[adr:adr + 2] += offset
            mujoco.mj_forward(model, data)  # every pose in `data` follows the objects
        elif self._changed:  # only the cameras' poses in `data` follow: the rest stays as the reset left it
            mujoco.mj_camlight(model, data)
        return bool(objects) or self._changed


def _move_cameras(model: Any, ids: Sequence[int], seed: int, cid: str, shift: float | None, turn: float | None) -> None:
    """Moves each of `model`'s cameras `ids` by `shift` in a direction of its own (camera.shift)
    and turns it by `turn` degrees about an axis of its own (camera.rotate), the directions and
    axes drawn from condition `cid`'s reset streams."""
    if shift:
        rng = perturb.reset_stream(seed, cid, "camera.shift")
        for cam in ids:  # one direction per camera, drawn in the order the cameras are given
            model.cam_pos[cam] += shift * _direction(rng)
    if turn:
        rng = perturb.reset_stream(seed, cid, "camera.rotate")
        for cam in ids:
            quat = _mul(model.cam_quat[cam], _rotation(_direction(rng), turn))
            model.cam_quat[cam] = quat / np.linalg.norm(quat)


def _scale_lights(model: Any, factor: float) -> None:
    """Scales the diffuse and ambient light of `model`'s lights and its headlight by `factor`."""
    model.light_diffuse[:] *= factor
    model.light_ambient[:] *= factor
    model.vis.headlight.diffuse[:] *= factor
    model.vis.headlight.ambient[:] *= factor


def free_joints(model: Any) -> list[int]:
    """The qpos address of every free joint (x, y, z, then a quaternion): the scene's free objects."""
    import mujoco  # optional: the simulator of the benchmarks that call this

    return [int(model.jnt_qposadr[j]) for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
