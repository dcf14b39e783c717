"""What other packages say goes to rollbench's debug log (`--debug`), not to the terminal.

A run's terminal shows rollbench's progress and results only (stdout: results; stderr:
rollbench's log lines and progress). What the packages a run loads say goes to rollbench's
log at debug level, which `--debug` shows:

- Python logging: a handler on the root logger (`install`) forwards every record that is not
  rollbench's own. The CLI installs it first, whatever the root logger holds, so that a
  library's first `logging.warning(...)` on the root logger (LeRobot 0.4.4's torchcodec
  warning, when its policy code is imported) finds a handler and does not call
  `logging.basicConfig()`, whose handler prints to stderr; a terminal handler that an import
  added anyway is removed (`reclaim`, after LeRobot's imports).
- warnings (`logging.captureWarnings`): pygame's `pkg_resources` deprecation (PushT), ...
- `print` to sys.stdout or sys.stderr from code that rollbench calls on a thread of its own
  (`to_debug_log`): LeRobot's "Loading weights from local directory" while a checkpoint
  loads, what LeRobot's dataset writer prints. Only that thread's writes are taken: the main
  thread's results and progress, and rollbench's own log lines, go on to the terminal.
- C libraries that write to file descriptor 2 themselves, which no Python redirection reaches
  and which a redirection of the descriptor would take from every thread: the AV1 encoder
  (SVT-AV1, ~20 lines per video) is set to errors only (`SVT_LOG=1`, unless set) for this
  process and the workers it starts, and libav's own printer (LeRobot hands libav's log back
  to it after each video) to errors (results/dataset.py), unless `--debug`.

Worker and shard processes write their stdout and stderr, C libraries' included, to their
files in `<output_dir>/logs/` (scheduler/worker.py); `install` is not called there and
`to_debug_log` changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any, cast

log = logging.getLogger("rollbench")

_installed = threading.Event()  # set by `install` (the CLI): until then this module changes nothing
_lock = threading.Lock()
_labels: dict[int, list[str]] = {}  # thread ident -> labels of its open to_debug_log blocks
_local = threading.local()  # .busy: this thread is writing a debug line (its writes pass through)


class ToDebug(logging.Handler):
    """The root logger's handler in a rollbench process: records of other packages go to
    rollbench's log at debug level (rollbench's own are handled by its own handler)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "rollbench" or record.name.startswith("rollbench."):
            return  # an embedding program's propagation of rollbench's records: handled already
        try:
            text = record.getMessage()
        except Exception:  # a library's malformed log call must not break the run
            text = str(record.msg)
        name = "warnings" if record.name == "py.warnings" else record.name
        for line in text.strip().splitlines():
            log.debug("%s: %s", name, line)


def _is_terminal_handler(handler: logging.Handler) -> bool:
    """A plain StreamHandler onto the process's stdout or stderr: what `logging.basicConfig()`
    or a library's own set-up adds (pytest's capture handlers are subclasses, and kept)."""
    if type(handler) is not logging.StreamHandler:
        return False
    stream = getattr(handler, "stream", None)
    return stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) or isinstance(stream, _Router)


def reclaim() -> None:
    """Remove the terminal handlers that imports added to the root logger, and put rollbench's
    back if one removed it; a no-op until `install` ran (a program that embeds rollbench
    without its CLI keeps its logging as it set it up)."""
    if not _installed.is_set():
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if _is_terminal_handler(handler):
            root.removeHandler(handler)
    if not any(isinstance(h, ToDebug) for h in root.handlers):
        root.addHandler(ToDebug())


def install(debug: bool) -> None:
    """Route other packages' logging and warnings to rollbench's debug log (the CLI calls this
    first, for every command)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, ToDebug):
            root.removeHandler(handler)
    root.addHandler(ToDebug())
    _installed.set()
    reclaim()
    logging.captureWarnings(True)
    if not debug:
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only (its banner is ~20 lines per video)


class _Router:
    """Stands in for sys.stdout or sys.stderr while a thread is in `to_debug_log`: that thread's
    writes become debug lines, every other thread's go to the stream that was there."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._pending: dict[int, str] = {}

    def write(self, text: str) -> int:
        ident = threading.get_ident()
        label = _labels.get(ident)
        if not label or getattr(_local, "busy", False):
            return self.stream.write(text)
        lines = (self._pending.pop(ident, "") + text).split("\n")
        if lines[-1]:
            self._pending[ident] = lines[-1]
        _emit(label[-1], lines[:-1])
        return len(text)

    def flush_thread(self, ident: int, label: str) -> None:
        rest = self._pending.pop(ident, "")
        if rest:
            _emit(label, [rest])

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self.stream, name)


def _emit(label: str, lines: list[str]) -> None:
    _local.busy = True  # the log handler writes to sys.stderr: those writes pass through
    try:
        for line in lines:
            line = line.rstrip("\r").rsplit("\r", 1)[-1]  # a progress bar's redraws: its last state
            if line.strip():
                log.debug("%s: %s", label, line)
    finally:
        _local.busy = False


def terminal(stream: IO[str] | _Router) -> IO[str]:
    """The stream under a `_Router` (rollbench's own log handler writes there)."""
    return stream.stream if isinstance(stream, _Router) else stream


@contextlib.contextmanager
def to_debug_log(label: str) -> Iterator[None]:
    """What this thread writes to sys.stdout and sys.stderr inside the block goes to the debug
    log as `label: line`; other threads' writes are untouched. Outside a process whose output
    rollbench owns (`install` not called: a worker, whose output is its log file, or a program
    that embeds rollbench) nothing is redirected."""
    if not _installed.is_set():
        yield
        return
    ident = threading.get_ident()
    with _lock:
        _labels.setdefault(ident, []).append(label)
        if not isinstance(sys.stdout, _Router):
            sys.stdout = cast(Any, _Router(sys.stdout))
        if not isinstance(sys.stderr, _Router):
            sys.stderr = cast(Any, _Router(sys.stderr))
    try:
        yield
    finally:
        with _lock:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, _Router):
                    stream.flush_thread(ident, label)
            _labels[ident].pop()
            if not _labels[ident]:
                del _labels[ident]
            if not _labels:  # the last block ended: the streams that were there come back
                sys.stdout = cast(Any, terminal(sys.stdout))
                sys.stderr = cast(Any, terminal(sys.stderr))
