"""rollbench: fast, parallel, crash-safe evaluation of robot-learning policies in simulation."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rollbench")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

__all__ = ["__version__"]
