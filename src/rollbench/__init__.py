"""rollbench: fast, parallel, crash-safe evaluation of robot-learning policies in simulation.

The package's facade, at the top of its layers: `rollbench.Evaluator` (evaluate a policy
object in memory, from Python: docs/python_api.md) is loaded on first use, so that `import
rollbench` stays light (the command line never loads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollbench.version import __version__

if TYPE_CHECKING:
    from rollbench.evaluator import EvalResult, Evaluator

__all__ = ["EvalResult", "Evaluator", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Evaluator", "EvalResult"):
        # lazy: the run's machinery (lifecycle, schedulers, numpy) loads when the API is first used
        from rollbench import evaluator

        return getattr(evaluator, name)
    raise AttributeError(f"module 'rollbench' has no attribute {name!r}")
