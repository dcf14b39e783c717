"""Paths a user gives rollbench to write (rollbench.writable): each command refuses one that
takes no file in one line naming the flag, the path and the OS's reason, before any work.

We run as root here, and os.access tells root that every folder is writable; /proc is not
(it takes no new file), so it stands for a folder the user cannot write."""

from __future__ import annotations

from pathlib import Path

import pytest

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
