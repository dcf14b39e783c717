"""Configuration: frozen dataclasses parsed from the command line."""

from rollbench.config.env import BENCHMARKS, BenchmarkConfig, Feature, register_benchmark
from rollbench.config.eval import EvalConfig
from rollbench.config.policy import PolicyConfig
from rollbench.config.run import RunConfig

__all__ = [
    "BENCHMARKS",
    "BenchmarkConfig",
    "EvalConfig",
    "Feature",
    "PolicyConfig",
    "RunConfig",
    "register_benchmark",
]
