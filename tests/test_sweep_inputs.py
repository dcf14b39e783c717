"""Bad sweep inputs (--eval.perturb, --eval.sweep, --eval.paraphrases): each is one line, exit 2,
naming the flag or file, the value and what is allowed, before any work (issue 46, items 9,
10 and 14): a level that is not finite, a paraphrase that is not a string (a TOML date), and
a spec that holds no condition besides the control, which would otherwise run as a plain run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rollbench import perturb
from rollbench.errors import ConfigError
from test_cli import assert_one_line_error

FAKE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=1")


def refused(cli, tmp_path: Path, *args: str, needles: tuple[str, ...]) -> str:
    """Run `rollbench eval` on the fake benchmark with `args`; it must be one line holding every
    needle, exit 2, and leave no output directory."""
    out = tmp_path / "o"
    line = assert_one_line_error(cli(*FAKE, *args, f"--output_dir={out}"), *needles)
    assert not out.exists(), "refused before any work"
    return line


# -- item 9: levels that are not finite ------------------------------------------------


@pytest.mark.parametrize(("spec", "needles"), [
    ("action.latency=inf", ("level inf of action.latency is not a finite number",
                            "action.latency takes whole numbers from 0 to 1000")),
    ("action.latency=nan", ("level nan of action.latency is not a finite number",)),
    ("action.latency=-inf", ("level -inf of action.latency is not a finite number",)),
    ("language.drop=nan", ("level nan of language.drop is not a finite number", "language.drop takes 0 or 1")),
    ("image.jpeg=Infinity", ("level Infinity of image.jpeg is not a finite number",)),
    ("action.noise=nan", ("level nan of action.noise is not a finite number", "from 0 to 100")),
    ("state.noise=0.1&action.latency=inf", ("level inf of action.latency is not a finite number",)),
])
def test_a_level_that_is_not_finite_is_one_line(cli, tmp_path: Path, spec: str, needles: tuple[str, ...]) -> None:
    refused(cli, tmp_path, f"--eval.perturb={spec}", needles=("--eval.perturb", *needles))


@pytest.mark.parametrize("axis", sorted(perturb.AXES))
@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "Infinity", "1e400"])
def test_no_axis_takes_a_level_that_is_not_finite(axis: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"^--x: level {raw} of {axis} is not a finite number; {axis} takes "):
        perturb.AXES[axis].level(raw, "--x")


@pytest.mark.parametrize(("name", "content", "needles"), [
    ("s.json", '{"axes": {"action.latency": [0, Infinity]}}', ("level inf of action.latency is not a finite number",)),
    ("s.json", '{"grid": {"action.noise": [NaN], "state.noise": [0.1]}}', ("level nan of action.noise",)),
    ("s.json", '{"conditions": [{"language.drop": -Infinity}]}', ("level -inf of language.drop",)),
    ("s.toml", '[axes]\n"action.latency" = [inf]\n', ("level inf of action.latency is not a finite number",)),
    ("s.toml", '[[conditions]]\n"image.jpeg" = nan\n', ("level nan of image.jpeg is not a finite number",)),
])
def test_a_sweep_file_with_a_level_that_is_not_finite_is_one_line_naming_it(
        cli, tmp_path: Path, name: str, content: str, needles: tuple[str, ...]) -> None:
    if name.endswith(".toml") and sys.version_info < (3, 11):
        pytest.skip("TOML sweep files need Python 3.11")
    path = tmp_path / name
    path.write_text(content)
    refused(cli, tmp_path, f"--eval.sweep={path}", needles=(f"--eval.sweep={path}: ", *needles))


# -- item 10: a paraphrase table of something else than strings ---------------------------


@pytest.mark.parametrize(("content", "needles"), [
    ('near = 1979-05-27\n', ("'near' holds datetime.date(1979, 5, 27) (date)",)),
    ('near = ["go near", 1979-05-27T07:32:00]\n', ("'near' holds ['go near', datetime.datetime(1979, 5, 27, 7, 32)]",
                                                  "(datetime, str)")),
    ('"reach a far target" = 3\n', ("'reach a far target' holds 3 (int)",)),
    ('[near]\nfirst = "go near"\n', ("'near' holds {'first': 'go near'} (dict)",)),
    ('near = []\n', ("'near' holds [] (empty)",)),
])
def test_a_paraphrase_file_that_holds_no_strings_is_one_line_naming_the_key(
        cli, tmp_path: Path, content: str, needles: tuple[str, ...]) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("TOML paraphrase files need Python 3.11")
    path = tmp_path / "p.toml"
    path.write_text(content)
    refused(cli, tmp_path, "--eval.perturb=language.paraphrase=1", f"--eval.paraphrases={path}",
            needles=(f"--eval.paraphrases={path}: ", *needles, "a list of non-empty paraphrases (strings)"))


@pytest.mark.parametrize(("value", "needles"), [
    ('{"near": [1, 2]}', ("'near' holds [1, 2] (int)",)),
    ('{"near": ["ok", " "]}', ("'near' holds ['ok', ' '] (str)",)),
])
def test_a_paraphrase_table_that_holds_no_strings_is_one_line_naming_the_key(
        cli, tmp_path: Path, value: str, needles: tuple[str, ...]) -> None:
    path = tmp_path / "p.json"
    path.write_text(value)
    for given in (value, str(path)):  # inline JSON and a JSON file
        refused(cli, tmp_path, "--eval.perturb=language.paraphrase=1", f"--eval.paraphrases={given}",
                needles=("--eval.paraphrases", *needles))


# -- item 14: a sweep that holds no condition ----------------------------------------------


@pytest.mark.parametrize(("spec", "why"), [
    (";", "it names no axis"),
    (" ; ;", "it names no axis"),
    ("action.noise=0", "every level it gives is its axis's rest level"),
    ("image.brightness=1;action.latency=0", "every level it gives is its axis's rest level"),
])
def test_a_perturb_spec_without_a_condition_is_one_line(cli, tmp_path: Path, spec: str, why: str) -> None:
    refused(cli, tmp_path, f"--eval.perturb={spec}",
            needles=(f"--eval.perturb: the sweep {spec!r} holds no condition besides the control: {why}",))


@pytest.mark.parametrize("content", [{"axes": {}}, {"grid": {}}, {"conditions": []}, {"conditions": [{}]},
                                     {"axes": {"action.noise": [0]}, "grid": {"light.intensity": [1]}}])
def test_a_sweep_file_without_a_condition_is_one_line_naming_it(cli, tmp_path: Path, content: dict) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(content))
    refused(cli, tmp_path, f"--eval.sweep={path}",
            needles=(f"--eval.sweep={path}: the sweep ", "holds no condition besides the control"))
