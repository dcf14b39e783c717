"""A run's terminal shows rollbench's progress and results only: what other packages log, warn,
print or write from C goes to the debug log (`--debug`); and a run writes outside its output
folder only where docs/architecture.md ("Where rollbench writes") says."""

from __future__ import annotations

import getpass
import logging
import os
import re
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_subprocess

#: the lines rollbench itself writes to stderr: its log lines and its progress lines
OURS = re.compile(r"^(DEBUG|INFO|WARNING|ERROR): |^episodes \d+/\d+ \|")
#: what other packages said in these runs before they were quieted
NOISE = ("torchcodec", "Svt[", "SVT", "pkg_resources", "Loading weights", "[mp4 @", "UserWarning", "WARNING:root:")


def only_rollbench_lines(err: str) -> None:
    others = [line for line in err.splitlines() if line.strip() and not OURS.match(line)]
    assert not others, "\n".join(others[:20])
    for word in NOISE:
        assert word not in err, (word, err[-3000:])


def private_dirs(tmp_path: Path) -> dict[str, str]:
    """HOME, XDG_CACHE_HOME and TMPDIR of a run, fresh and empty."""
    env = {"HOME": tmp_path / "home", "XDG_CACHE_HOME": tmp_path / "home" / ".cache", "TMPDIR": tmp_path / "tmp"}
    for path in env.values():
        path.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in env.items()}


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_other_packages_logging_and_warnings_go_to_the_debug_log(tmp_path: Path) -> None:
    """A policy built in the driver that logs on the root logger before anything else did (which
    makes Python's logging print to stderr unless a handler is there), on a module logger, and
    warns: nothing of it on the terminal; all of it in `--debug`'s log."""
    args = ("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_noisy_policies:noisy",
            "--policy.placement=driver", "--workers=1", "--eval.n_episodes=1", "--eval.report=false")
    res = run_subprocess(*args, f"--output_dir={tmp_path / 'plain'}")
    assert res.rc == 0, res.err
    only_rollbench_lines(res.err)
    assert "NOISE" not in res.err + res.out
    assert "complete results in" in res.out  # the results still go to stdout

    res = run_subprocess(*args, "--debug", f"--output_dir={tmp_path / 'debug'}")
    assert res.rc == 0, res.err
    for said in ("DEBUG: root: NOISE-ROOT", "DEBUG: some_library: NOISE-MODULE", "NOISE-WARNING"):
        assert said in res.err, (said, res.err[-3000:])


def test_a_threads_prints_go_to_the_debug_log_while_other_threads_write_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LeRobot's checkpoint loads on a thread of its own and prints; the main thread's results
    and rollbench's own log lines from that thread reach the terminal meanwhile."""
    from rollbench import quiet

    installed = threading.Event()
    installed.set()
    monkeypatch.setattr(quiet, "_installed", installed)
    log = logging.getLogger("rollbench")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    monkeypatch.setattr(log, "handlers", [Keep()])  # not the CLI's stderr handler of an earlier test
    level = log.level
    log.setLevel(logging.DEBUG)
    inside, printed = threading.Event(), threading.Event()

    def load() -> None:
        with quiet.to_debug_log("lib"):
            print("Loading weights from local directory")
            print("half a line", end="")
            sys.stderr.write("a library's stderr\n")
            inside.set()
            printed.wait(10)

    try:
        loader = threading.Thread(target=load)
        loader.start()
        assert inside.wait(10)
        print("RESULT TABLE")  # the main thread, while the loader is inside its block
        print("progress", file=sys.stderr)
        printed.set()
        loader.join(10)
    finally:
        log.setLevel(level)
    out, err = capsys.readouterr()
    assert "RESULT TABLE" in out and "progress" in err
    assert "Loading weights" not in out + err and "a library's" not in out + err
    assert seen == ["lib: Loading weights from local directory", "lib: a library's stderr", "lib: half a line"]
    assert not isinstance(sys.stdout, quiet._Router) and not isinstance(sys.stderr, quiet._Router)


@pytest.mark.pusht
def test_a_pusht_run_shows_no_pygame_warning(tmp_path: Path) -> None:
    pytest.importorskip("gym_pusht")
    res = run_subprocess("eval", "--env.type=pusht", "--policy.type=random", "--eval.n_episodes=1",
                         "--env.episode_length=5", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    only_rollbench_lines(res.err)


@pytest.mark.lerobot
@pytest.mark.pusht
def test_a_recorded_lerobot_run_shows_only_rollbench_lines(tmp_path: Path) -> None:
    """LeRobot's checkpoint print, its torchcodec warning (once per episode), the AV1 encoder's
    banner (from C, per video) and the mp4 muxer's lines (the join): none on the terminal. The
    run writes nothing in HOME (LeRobot's `datasets` cache stays in the run) nor leaves
    temporary files but torch's empty inductor folder."""
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    pytest.importorskip("gym_pusht")
    from lerobot_helpers import make_checkpoint
    from rollbench.benchmarks.pusht import PushTConfig

    ckpt = make_checkpoint(tmp_path / "ckpt", PushTConfig())
    env = private_dirs(tmp_path)
    res = run_subprocess("eval", "--env.type=pusht", "--env.episode_length=8", "--policy.type=lerobot",
                         f"--policy.path={ckpt}", "--eval.n_episodes=2", "--eval.recording=true",
                         "--eval.report=false", f"--output_dir={tmp_path / 'out'}", **env)
    assert res.rc == 0, res.err
    only_rollbench_lines(res.err)
    assert "Loading weights" not in res.out
    assert "PushT-v0" in res.out and "dataset: 2 episodes" in res.out
    assert files_under(tmp_path / "home") == set()
    assert {p.name for p in (tmp_path / "tmp").iterdir()} <= {f"torchinductor_{getpass.getuser()}"}


def test_a_run_writes_under_home_only_where_documented(tmp_path: Path) -> None:
    """With the report (matplotlib), in two workers: matplotlib's font cache in rollbench's
    cache folder, not ~/.cache/matplotlib; nothing left in TMPDIR."""
    pytest.importorskip("matplotlib")
    env = private_dirs(tmp_path)
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=2", "--workers=2",
                         "--eval.report=true", f"--output_dir={tmp_path / 'out'}", **env)
    assert res.rc == 0, res.err
    assert (tmp_path / "out" / "report.html").is_file()
    home = files_under(tmp_path / "home")
    assert all(p.startswith(".cache/rollbench/matplotlib/") for p in home), home
    if not os.environ.get("MPLCONFIGDIR") and not os.environ.get("ROLLBENCH_CACHE"):  # a user's own is kept
        assert home, "matplotlib's font cache is not in rollbench's cache folder"
    assert not any((tmp_path / "tmp").iterdir())


def test_a_run_under_a_long_tmpdir_starts_its_workers(tmp_path: Path) -> None:
    """The forkserver's socket lives in multiprocessing's folder under TMPDIR and a socket's path
    holds 107 bytes: under a TMPDIR of 100 bytes the run stopped with "AF_UNIX path too long"
    (CI's pytest folders reached it). Its folder goes to /tmp instead; TMPDIR stays empty."""
    long_tmp = tmp_path / ("t" * max(1, 100 - len(str(tmp_path)) - 1))
    long_tmp.mkdir()
    assert len(str(long_tmp)) >= 100
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=4", "--workers=2",
                         f"--output_dir={tmp_path / 'out'}", TMPDIR=str(long_tmp))
    assert res.rc == 0, res.err
    assert "complete results in" in res.out
    assert not any(long_tmp.iterdir())
