"""One root for every error rollbench raises on purpose.

The CLI prints a `RollbenchError` as one line (no traceback unless `--debug`) and maps it
to an exit code: usage and configuration problems exit 2, failures during a run exit 1.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable

#: errno values that mean "the disk (or the user's quota on it) is full"
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(err: OSError) -> bool:
    """Whether a failed write means the disk (or the user's quota on it) is full."""
    return err.errno in DISK_FULL


class RollbenchError(Exception):
    """Base of every error rollbench raises for the user to read."""

    exit_code = 1


class ConfigError(RollbenchError, ValueError):
    """A flag, file or value is not acceptable; the message names it and what is allowed."""

    exit_code = 2


class UnknownNameError(ConfigError, KeyError):
    """A registry lookup missed (unknown benchmark, task, policy type)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BenchmarkUnavailable(ConfigError):
    """The benchmark's simulator package is not installed."""


class PolicyError(RollbenchError):
    """A policy misbehaved during a run (wrong action shape, NaN actions, raised)."""


class PolicyHang(PolicyError):
    """A policy call in this process did not return within `--eval.step_timeout_s`: the run
    stops (a call in progress cannot be stopped safely); what finished is in the log."""


class EpisodesLost(RollbenchError):
    """The policy lost the state of the episodes on `slots` (its server restarted, say):
    those episodes cannot go on, but the policy can start new ones. The schedulers run
    them again from their start; each retry uses up one of `--eval.max_retries`."""

    def __init__(self, message: str, slots: Iterable[int]) -> None:
        super().__init__(message)
        self.slots = tuple(int(s) for s in slots)

    def __reduce__(self) -> tuple[object, ...]:  # crosses process boundaries (Ray actors)
        return (EpisodesLost, (str(self), self.slots))


class WorkerError(RollbenchError):
    """A worker process failed; carries the remote traceback, the worker and the unit."""


class DiskFull(RollbenchError):
    """The output directory's disk (or quota) filled during a run; what was logged is kept."""


class RunInterrupted(RollbenchError):
    """The user stopped the run (Ctrl-C); finished episodes are in the log."""

    exit_code = 130


def did_you_mean(word: str, choices: Iterable[str], show: Callable[[str], str] = repr) -> str:
    """` Did you mean <closest>?` (shown by `show`), or "" when nothing is close."""
    import difflib  # lazy: `rollbench --help` does not load difflib (start-up time)

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean {show(close[0])}?" if close else ""


def unknown_choice(flag: str, value: str, known: list[str] | tuple[str, ...], what: str) -> ConfigError:
    """`--flag='value' is not <what>. Did you mean 'x'? Known: ...` as a ConfigError to raise."""
    return ConfigError(f"{flag}={value!r} is not {what}.{did_you_mean(value, known)} Known: {', '.join(known)}")


def message_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an error's message (its type's name when it has none), for errors
    said in one line."""
    lines = str(err).strip().splitlines()
    return (lines[0] if lines else type(err).__name__)[:limit]


def error_line(err: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`."""
    return f"{type(err).__name__}: {message_line(err, limit)}"
