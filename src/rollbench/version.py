"""rollbench's version: the installed distribution's, or the source tree's. A module of its own,
at the bottom of the package, so that what records it (eval_info.json, `rollbench --version`,
the policy server) does not import the package's facade (`rollbench/__init__.py`)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rollbench")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"
