"""Which LeRobot line is installed, for what rollbench does the way the installed LeRobot does.

rollbench supports LeRobot 0.4.4 (Python 3.11) and 0.6.x (Python 3.12) (docs/lerobot.md, "Two
LeRobot lines"). Where the two lines' lerobot-eval differ in what a policy or an episode sees,
rollbench follows the installed one; without LeRobot, today's line (0.6). Read from the
installed distribution's metadata, not by importing LeRobot (seconds of imports).
"""

from __future__ import annotations

import functools
import re
from importlib import metadata


@functools.cache
def installed() -> tuple[int, int, int] | None:
    """The installed LeRobot's (major, minor, patch), or None."""
    try:
        text = metadata.version("lerobot")
    except metadata.PackageNotFoundError:
        return None
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        return None
    return int(found[1]), int(found[2]), int(found[3] or 0)


def before_0_5() -> bool:
    """The 0.4 line is installed (0.5 changed what is below; rollbench supports 0.4.4 and 0.6.x)."""
    version = installed()
    return version is not None and version < (0, 5, 0)


@functools.cache
def prompts_from_the_inner_env() -> bool:
    """Whether lerobot-eval's `task` string (a VLA's prompt) comes from the innermost env.

    0.6's rollout calls `task_description`, else `task`, through the vector env, which finds
    the attribute under gymnasium's wrappers (gym-aloha's `task`: "insertion"); 0.4.4's
    `add_envs_task` looks at the outer wrapper only and finds nothing there on ALOHA ("")."""
    return not before_0_5()
