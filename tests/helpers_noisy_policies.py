"""A policy that talks the way third-party packages do (tests/test_quiet.py), referenced as
`--policy.type=module --policy.path=helpers_noisy_policies:noisy`."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from helpers_policies import zeros


def noisy(ctx: Any) -> Any:
    """All-zero actions, built after a library's first log line on the root logger (which calls
    `logging.basicConfig()` when the root logger has no handler yet) and a warning."""
    logging.warning("NOISE-ROOT a library's warning on the root logger")
    logging.getLogger("some_library").warning("NOISE-MODULE a library's module logger")
    warnings.warn("NOISE-WARNING pkg_resources-like deprecation", UserWarning, stacklevel=1)
    return zeros(ctx)
