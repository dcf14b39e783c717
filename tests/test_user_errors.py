"""Bad input answered in one line (exit 2) before any work. Paths a user gives rollbench to
write (rollbench.writable): each command refuses one that takes no file in one line naming the
flag, the path and the OS's reason; then issue 46's bad inputs (a Ray address, a finished
run's folders, seeds, flags that would change nothing, slow answers).

We run as root here, and os.access tells root that every folder is writable; /proc is not
(it takes no new file), so it stands for a folder the user cannot write."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import REPO, load_info, run_subprocess, subprocess_env
from rollbench.errors import ConfigError
from rollbench.writable import output_dir, output_file
from test_cli import assert_one_line_error

FAKE = ("eval", "--env.type=fake", "--eval.n_episodes=1")
NO_FILE = "/proc takes no new file ("


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # a policy that cannot be built: refused before it, so the path is checked first
        ((*FAKE, "--policy.type=module", "--policy.path=helpers_policies:not_a_policy", "--output_dir=/proc/run"),
         ("--output_dir='/proc/run': ", NO_FILE)),
        ((*FAKE, "--policy.type=expert", "--output_dir={tmp}/run", "--eval.recording=true",
          "--eval.recording_root=/proc/nope"), ("--eval.recording_root='/proc/nope': ", NO_FILE)),
        (("tune", "--env.type=fake", "--policy.type=expert", "--tune.output=/proc/t.json"),
         ("--tune.output='/proc/t.json': ", NO_FILE)),
        (("tune", "--env.type=fake", "--policy.type=expert", "--tune.output={tmp}"), ("--tune.output='{tmp}' is a directory",)),
        (("merge", "/proc"), ("rollbench merge DIR='/proc': ", NO_FILE)),
        ((*FAKE, "--policy.type=expert", "--output_dir={tmp}/a_file/run"), ("--output_dir='{tmp}/a_file/run': ",
                                                                             "{tmp}/a_file is a file, not a directory")),
    ],
    ids=["eval-output_dir", "eval-recording_root", "tune-output", "tune-output-a-folder", "merge-dir", "a-file-on-the-way"],
)
def test_a_path_that_takes_no_file_is_one_line_before_any_work(cli, tmp_path: Path, args: tuple[str, ...],
                                                                needles: tuple[str, ...]) -> None:
    (tmp_path / "a_file").write_text("keep me")
    res = cli(*(a.format(tmp=tmp_path) for a in args))
    line = assert_one_line_error(res, *(n.format(tmp=tmp_path) for n in needles))
    assert "give a path in a directory you can write" in line or "is a directory" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], "a refused path must leave nothing behind"
    assert (tmp_path / "a_file").read_text() == "keep me"


def test_output_dir_checks_the_nearest_folder_and_makes_nothing(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    assert output_dir("--output_dir", str(deep)) == deep
    assert list(tmp_path.iterdir()) == [], "the probe file is removed and no folder is made"
    with pytest.raises(ConfigError, match=r"^--x='/proc/a/b': /proc takes no new file \(.+\); give a path"):
        output_dir("--x", "/proc/a/b")


def test_output_file_wants_a_file_in_a_folder_that_takes_one(tmp_path: Path) -> None:
    assert output_file("--html", str(tmp_path / "x.html")) == tmp_path / "x.html"
    assert output_file("--tune.output", str(tmp_path / "new" / "t.json"), parents=True) == tmp_path / "new" / "t.json"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="existing directory"):
        output_file("--html", str(tmp_path / "new" / "x.html"))
    with pytest.raises(ConfigError, match="is a directory; give a file path"):
        output_file("--html", str(tmp_path))
    with pytest.raises(ConfigError, match=r"^--html='/proc/x.html': /proc takes no new file"):
        output_file("--html", "/proc/x.html")


# -- issue 46: bad inputs that were not one clean line (exit 2, before any work) ------------------

QUICK = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=1", "--eval.report=false")


@contextlib.contextmanager
def not_ray(answer: bytes | None) -> Iterator[int]:
    """A TCP listener on loopback that is no Ray cluster: it accepts and says nothing (None),
    or says `answer`; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.ray
@pytest.mark.parametrize(("answer", "needle"), [(None, "accepts connections but did not answer as a Ray cluster"),
                                                (b"garbage\r\n", "answered b'garbage\\r\\n', which is not Ray's")],
                         ids=["silent", "garbage"])
def test_something_else_at_the_ray_address_is_one_line_without_rays_log(tmp_path: Path, answer: bytes | None,
                                                                       needle: str) -> None:
    """Was: 21 lines of Ray's gcs_client.cc, then `unexpected error: ConnectionError` after ~22 s."""
    pytest.importorskip("ray")
    with not_ray(answer) as port:
        t0 = time.monotonic()
        res = run_subprocess(*QUICK, "--executor=ray", f"--ray.address=127.0.0.1:{port}", "--ray.connect_timeout_s=2",
                             f"--output_dir={tmp_path / 'out'}", timeout=120)
        took = time.monotonic() - t0
    assert_one_line_error(res, f"--ray.address=127.0.0.1:{port}: something at 127.0.0.1:{port}", needle,
                          "ray start --head")
    assert took < 30, took
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("address", ["not a host", "10.0.0.5", "10.0.0.5:99999", "local", "ray://:10001"])
def test_a_ray_address_of_the_wrong_form_is_refused_when_the_flags_are_read(cli, tmp_path: Path, address: str) -> None:
    """Was: `unexpected error: ValueError: Invalid address format` once Ray was imported and the policy built."""
    res = cli(*QUICK, "--executor=ray", f"--ray.address={address}", f"--output_dir={tmp_path / 'out'}")
    assert_one_line_error(res, f"--ray.address={address!r} is not allowed", "HOST:PORT")
    assert not (tmp_path / "out").exists()


def test_ray_failing_to_join_is_one_line_and_its_output_goes_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    """What Ray's C++ core writes to file descriptor 2 while `ray.init` runs goes to the debug log."""
    from rollbench.executors import ray as ray_executor

    class FakeRay:
        def init(self, **kwargs: object) -> None:
            os.write(2, b"[2026-12-07 W 1 1] gcs_client.cc:210: Failed to get cluster ID from GCS server\n")
            raise ConnectionError("GCS has not started yet")

    with caplog.at_level(logging.DEBUG, logger="rollbench"), pytest.raises(ConfigError) as err:
        ray_executor._join(FakeRay(), {"address": "10.0.0.5:6379"}, "10.0.0.5:6379")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("--ray.address=10.0.0.5:6379: Ray could not join the cluster there (")
    assert "ConnectionError: GCS has not started yet" in msg
    assert any("gcs_client.cc:210" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


def _unwritable(folder: Path, how: str) -> Callable[[], None]:
    """Make `folder` (a finished run's) take no new file; returns what undoes it."""
    if how == "immutable":
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            if os.geteuid() == 0:
                pytest.skip("neither chattr +i nor a read-only mode stops root writing here")
            folder.chmod(0o555)
            return lambda: folder.chmod(0o755)
        return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)
    shutil.rmtree(folder)
    if how == "a-file":
        folder.write_text("not a folder")
    else:
        folder.symlink_to(folder.parent / "gone")
    return lambda: None


@pytest.mark.parametrize(("sub", "how", "needle"), [
    ("episodes", "immutable", "{out}/episodes takes no new file ("),
    ("episodes", "a-file", "{out}/episodes is a file, not a directory"),
    ("episodes", "dangling-link", "{out}/episodes is a link to {out}/gone, which does not exist"),
    ("videos", "immutable", "{out}/videos takes no new file ("),
], ids=["episodes-immutable", "episodes-a-file", "episodes-dangling-link", "videos-immutable"])
def test_rerunning_a_run_whose_folders_take_no_file_is_one_line(cli, tmp_path: Path, sub: str, how: str,
                                                                  needle: str) -> None:
    """Was: `unexpected error: PermissionError` when the rerun first wrote into `episodes/`."""
    out = tmp_path / "run"
    flags = (*QUICK, "--eval.max_episodes_rendered=1", f"--output_dir={out}")
    assert cli(*flags).rc == 0
    before = sorted(p.name for p in out.rglob("*"))
    undo = _unwritable(out / sub, how)
    try:
        res = cli(*flags)
    finally:
        undo()
    assert_one_line_error(res, f"--output_dir={str(out)!r}: ", needle.format(out=out))
    if how == "immutable":
        assert sorted(p.name for p in out.rglob("*")) == before, "nothing written, nothing left behind"


@pytest.mark.parametrize(("flags", "needles"), [
    (("--seed=-1",), ("--seed=-1 is not allowed: seed -1", "give seeds 0..")),
    (("--seeds=-5,1000",), ("--seeds=-5,1000 is not allowed: seed -5",)),
    # LIBERO seeds numpy's legacy RandomState (np.random.seed), which takes 0..2**32-1
    ((f"--seed={2**32}",), (f"--seed={2**32} is not allowed", f"0..{2**32 - 1}")),
    ((f"--seed={2**32 - 2}", "--eval.n_episodes=3"), (f"--seed={2**32 - 2} is not allowed",)),
], ids=["negative-seed", "negative-in-seeds", "past-numpy", "last-episode-past-numpy"])
def test_a_seed_no_env_takes_is_refused_before_any_episode(cli, tmp_path: Path, flags: tuple[str, ...],
                                                           needles: tuple[str, ...]) -> None:
    """Was: every episode ran and failed with gymnasium's traceback, counted as infrastructure errors."""
    n = [] if any("n_episodes" in f for f in flags) else ["--eval.n_episodes=1"]
    res = cli("eval", "--env.type=fake", "--policy.type=expert", *n, *flags, f"--output_dir={tmp_path / 'out'}")
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "out").exists()


def test_a_seed_whose_episodes_all_failed_still_counts_among_the_seeds(tmp_path: Path) -> None:
    """Was: `all 1 seeds pooled` for --seeds=1000,2000 when seed 2000's episodes all failed."""
    res = run_subprocess("eval", "--env.type=fake_failing", "--env.task=near", "--policy.type=expert",
                         "--eval.n_episodes=1", "--seeds=1000,2000", "--eval.max_retries=0", "--eval.report=false",
                         f"--output_dir={tmp_path}", ROLLBENCH_PLUGINS="failing_bench", RB_FAIL_SEED="2000")
    assert res.rc == 1, res.err
    assert "all 2 seeds pooled: " in res.out and "2000: -%" in res.out, res.out
    assert load_info(tmp_path)["across_seeds"]["n_seeds"] == 2


@pytest.mark.parametrize(("flags", "needles"), [
    (("--policy.fresh_weights=true",), ("--policy.fresh_weights=true gives each episode its own copy",
                                        "has none", "drop the flag")),
    (("--ray.actors=2",), ("--ray.actors=2 is an option of --executor=ray", "executor is local")),
    (("--ray.address=10.0.0.5:6379",), ("--ray.address=10.0.0.5:6379 is an option of --executor=ray",)),
    (("--executor=ray", "--workers=2"), ("--workers=2 sets this machine's worker processes", "--ray.actors")),
], ids=["fresh-weights-without-weights", "ray-actors-without-ray", "ray-address-without-ray", "workers-with-ray"])
def test_a_flag_that_would_change_nothing_is_refused(cli, tmp_path: Path, flags: tuple[str, ...],
                                                     needles: tuple[str, ...]) -> None:
    """Was: accepted and ignored, which a user would take as applied."""
    res = cli(*QUICK, *flags, f"--output_dir={tmp_path / 'out'}")
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "out").exists()


def test_fewer_workers_than_asked_for_says_why(cli, tmp_path: Path) -> None:
    """Was: --workers=2 ran 1 worker when the episodes fit one worker's slots, with nothing said or recorded."""
    res = cli(*QUICK, "--workers=2", "--slots_per_worker=4", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    reason = load_info(tmp_path)["scheduling"]["workers_reason"]
    assert reason == "running 1 of 2 workers: the 3 episodes to run fit in 1 x 4 slots (--slots_per_worker=4)"
    assert f"INFO: --workers=2: {reason}" in res.err.splitlines()
    assert load_info(tmp_path)["scheduling"]["workers"] == 1


def test_a_missing_versus_directory_is_refused_at_once(cli, tmp_path: Path) -> None:
    """Was: the answer came after 61 s (a 60 s wait for its run.json)."""
    t0 = time.monotonic()
    res = cli(*QUICK, f"--eval.versus={tmp_path / 'nope'}", f"--output_dir={tmp_path / 'out'}")
    assert_one_line_error(res, f"--eval.versus={str(tmp_path / 'nope')!r}: no such directory")
    assert time.monotonic() - t0 < 20
    assert not (tmp_path / "out").exists()


def test_a_misspelled_policy_type_is_answered_without_importing_lerobot(tmp_path: Path) -> None:
    """Was: ~22 s (LeRobot's policy configs import torch and transformers) before the did-you-mean."""
    code = ("import sys\nfrom rollbench.cli import main\nrc = main(['eval', '--env.type=fake', '--policy.type=exprt', "
            f"'--output_dir={tmp_path / 'out'}'])\nprint(rc, 'torch' in sys.modules, 'lerobot' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=subprocess_env())
    assert proc.stdout.split() == ["2", "False", "False"], (proc.stdout, proc.stderr)
    assert "--policy.type='exprt': no policy type named 'exprt'. Did you mean 'expert'?" in proc.stderr
    if importlib.util.find_spec("lerobot") is not None:
        assert "LeRobot's and its plugins' (with --policy.path): " in proc.stderr and " act," in proc.stderr
