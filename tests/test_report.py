"""`rollbench report`: report.html from real runs — its content, that it is offline, that it
is fast, and that a real browser shows it (headless Chromium) with its videos playing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_info
from helpers_report import mt10, offline_problems, task, write_info
from rollbench.errors import ConfigError
from rollbench.report import report_main, write_report
from rollbench.report.plots import Span, activity

pytest.importorskip("matplotlib")
pytest.importorskip("av")  # the fake benchmark's videos


@pytest.fixture
def filmed(cli, tmp_path: Path) -> Path:
    """fake, random policy: 3 tasks x 4 episodes, the first 2 of each filmed (32x32)."""
    out = tmp_path / "run"
    res = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=4",
              "--eval.max_episodes_rendered=2", f"--output_dir={out}")
    assert res.rc == 0, res.err
    return out


def video_sources(page: str) -> list[str]:
    return re.findall(r'<video [^>]*src="([^"]+)"', page)


def test_report_shows_the_run(filmed: Path) -> None:
    page = write_report(filmed).read_text()
    info = load_info(filmed)
    for heading in ("Success per task", "Episode lengths", "Throughput over time", "Videos", "Reproduce"):
        assert f"<h2>{heading}</h2>" in page
    assert page.count("<svg") == 3  # success bars, lengths, throughput
    overall = info["overall"]
    lo, hi = overall["pc_success_ci95"]
    assert f"{overall['pc_success']:.1f}%" in page and f"95% CI {lo:.1f}–{hi:.1f}" in page
    for t in info["per_task"]:
        assert f"{t['task']}  {t['summary']['n_success']}/4" in page  # a bar's label
    assert "12 logged episodes from 1 process" in page
    assert f"<td>numpy</td><td>{info['versions']['numpy']}</td>" in page
    assert offline_problems(page) == []


def test_command_is_the_recorded_one_else_rebuilt_from_config(filmed: Path) -> None:
    info = load_info(filmed)
    info["command"] = ["rollbench", "eval", "--env.type=fake", "--output_dir=a dir"]
    (filmed / "eval_info.json").write_text(json.dumps(info))
    page = write_report(filmed).read_text()
    assert "the command as it was run:</p><pre>rollbench eval --env.type=fake &#x27;--output_dir=a dir&#x27;</pre>" in page
    del info["command"]  # as eval_info.json files written before the command was recorded
    (filmed / "eval_info.json").write_text(json.dumps(info))
    page = write_report(filmed).read_text()
    rebuilt = re.search(r"rebuilt from the recorded config[^<]*:</p><pre>([^<]*)</pre>", page)
    assert rebuilt, page
    flags = rebuilt.group(1).split()
    assert flags[:4] == ["rollbench", "eval", "--env.type=fake", "--env.task=all"]
    assert {"--policy.type=random", "--eval.n_episodes=4", "--eval.max_episodes_rendered=2", "--resume=true"} <= set(flags)
    assert not any(f.startswith("--env.episode_length") for f in flags)  # None: the default, not a flag


def test_videos_are_linked_failures_first(filmed: Path) -> None:
    page = write_report(filmed).read_text()
    sources = video_sources(page)
    info = load_info(filmed)
    assert sorted(sources) == sorted(p for t in info["per_task"] for p in t["metrics"]["video_paths"])
    assert all((filmed / s).is_file() for s in sources)
    # within a task, failures come before successes; tasks from worst to best
    captions = re.findall(r"<figcaption><b>([^<]+)</b> <span class=\"(ok|bad)\">", page)
    by_task: dict[str, list[str]] = {}
    for name, outcome in captions:
        by_task.setdefault(name, []).append(outcome)
    assert all(outcomes == sorted(outcomes) for outcomes in by_task.values())  # "bad" < "ok"
    rates = {t["task"]: t["summary"]["pc_success"] for t in info["per_task"]}
    order = list(dict.fromkeys(name for name, _ in captions))
    assert [rates[n] for n in order] == sorted(rates[n] for n in order)


def test_report_main_prints_only_the_path(filmed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main([str(filmed)], {}) == 0
    assert capsys.readouterr().out == f"{filmed / 'report.html'}\n"
    # elsewhere, the page reaches the videos from where it is; and fewer per task when asked
    elsewhere = tmp_path / "pages" / "r.html"
    elsewhere.parent.mkdir()
    assert report_main([str(filmed)], {"output": str(elsewhere), "videos_per_task": "1"}) == 0
    assert capsys.readouterr().out == f"{elsewhere}\n"
    sources = video_sources(elsewhere.read_text())
    assert len(sources) == 3 and all((elsewhere.parent / s).resolve().is_file() for s in sources)


@pytest.mark.parametrize(
    "positional, flags, words",
    [
        ([], {}, ["takes one directory", "got none"]),
        (["{run}", "{run}"], {}, ["takes one directory", "got 2"]),
        (["{tmp}/nowhere"], {}, ["DIR='", "nowhere", "is not a directory"]),
        (["{tmp}"], {}, ["holds no eval_info.json"]),
        (["{run}"], {"videos_per_task": "-1"}, ["--videos_per_task='-1'", ">= 0"]),
        (["{run}"], {"video_per_task": "1"}, ["unknown flag --video_per_task", "Did you mean --videos_per_task?"]),
        (["{run}"], {"output": "{tmp}/no/such/dir/r.html"}, ["--output='", "existing directory"]),
        (["{run}"], {"output": "/proc/r.html"}, ["--output='/proc/r.html'", "/proc takes no new file"]),
    ],
    ids=["none", "two", "missing", "not-a-run", "negative", "typo", "output-dir", "output-unwritable"],
)
def test_bad_input_is_a_one_line_config_error(filmed: Path, tmp_path: Path, positional, flags, words) -> None:
    fill = {"run": filmed, "tmp": tmp_path}
    with pytest.raises(ConfigError) as err:
        report_main([p.format(**fill) for p in positional], {k: v.format(**fill) for k, v in flags.items()})
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_lerobot_eval_output_renders_what_it_records(tmp_path: Path) -> None:
    """No seeds, step counts, episode log or config: those sections say so; the rest is drawn."""
    write_info(tmp_path, [task("t", [True, False, True]), task("u", [False] * 3, task_id=1)])
    page = write_report(tmp_path).read_text()
    assert "written by lerobot-eval" in page and page.count("<svg") == 1
    assert "records no step counts" in page and "no episode log with timings" in page
    assert "records neither the command nor the config" in page and "suite/0  2/3" in page


def test_partial_run_lists_its_failed_units(tmp_path: Path) -> None:
    crashed = task("t", [True, False], seeds=[0, 1], n_steps=[5, 20])
    crashed["failed"] = [{"episode_index": 2, "seed": 2, "error": "Traceback (most recent call last):\n  ...\nRuntimeError: boom"}]
    nothing = task("u", [], seeds=[], n_steps=[], task_id=1)
    nothing["failed"] = [{"episode_index": 0, "seed": 0, "error": None}]
    write_info(tmp_path, [crashed, nothing], status="partial", missing_units=[{"task": "t", "episode_index": 3}])
    page = write_report(tmp_path).read_text()
    assert "partial results: 1 planned units missing, 2 failed" in page
    assert "<td>t</td><td>2</td><td>2</td><td>RuntimeError: boom</td>" in page
    assert "<td>u</td><td>0</td><td>0</td><td>unknown error</td>" in page
    assert "<b>2</b><span>failed units" in page and "50.0%" in page  # crashes are not policy failures


def test_activity_counts_busy_workers_and_rate() -> None:
    spans = [Span(0, 10, "w0"), Span(5, 15, "w0"), Span(0, 20, "w1"), Span(10, 20, "w1")]
    act = activity(spans, points=201)  # one sample every 0.1 s
    at = {t: int(act.busy[round(t * 10)]) for t in (2, 12, 17)}
    assert at == {2: 2, 12: 2, 17: 1}  # w0's two overlapping slots count once; w0 is idle after 15
    assert act.workers == 2
    assert sum(act.rate * (act.edges[1] - act.edges[0])) == pytest.approx(len(spans))


@pytest.mark.slow
@pytest.mark.metaworld
def test_write_report_on_mt10(tmp_path_factory: pytest.TempPathFactory) -> None:
    """MT10 x 10 episodes, in a fresh process: a small page with its three plots. How fast it is
    drawn is measured by bench/report_speed.py (a timed test failed on a loaded machine)."""
    run = mt10(tmp_path_factory, "expert")
    code = f"from rollbench.report import write_report; print(write_report({str(run)!r}).stat().st_size)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    assert int(out) < 200_000
    page = (run / "report.html").read_text()
    assert "100 logged episodes" in page and page.count("<svg") == 3


# -- a real browser -------------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
PLAY_FIRST_VIDEO = """<script>
addEventListener('load', () => {
  const v = document.querySelector('video');
  v.addEventListener('timeupdate', () => { if (v.currentTime > 0) document.title = 'playing ' + v.videoWidth + 'x' + v.videoHeight; });
  v.addEventListener('error', () => { document.title = 'video error ' + (v.error && v.error.code); });
  v.play().catch(e => { document.title = 'play refused: ' + e.name; });
});
</script>"""


def report_title(page: Path) -> str:
    found = re.search(r"<title>([^<]*)</title>", page.read_text())
    assert found
    return found.group(1)


def chromium(page: Path, profile: Path, *flags: str) -> tuple[str, str, set[str]]:
    """(stdout, console messages, URLs the page requested over the network) of one headless load."""
    netlog = profile.with_suffix(".netlog.json")
    proc = subprocess.run(
        [CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", f"--log-net-log={netlog}", "--hide-scrollbars", *flags, page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    console = "\n".join(ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln)
    text = netlog.read_text()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:  # a log cut short by the exit lacks its closing brackets
        events = json.loads(text.rstrip().rstrip(",") + "]}")
    names = {v: k for k, v in events["constants"]["logEventTypes"].items()}
    # the page's own requests carry its site (file://) in their isolation key; the browser's
    # own background requests (updates, accounts) do not
    requested = {
        e["params"]["url"] for e in events["events"]
        if names.get(e["type"]) == "URL_REQUEST_START_JOB" and "file://" in str(e.get("params", {}).get("network_isolation_key"))
    }
    return proc.stdout, console, requested


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium: apt-get install -y chromium")
def test_chromium_shows_the_report_offline_with_a_playing_video(filmed: Path, tmp_path: Path) -> None:
    # the detectors catch what they look for: a page that logs and fetches
    control = tmp_path / "control.html"
    control.write_text('<img src="https://example.invalid/x.png"><script>console.error("boom")</script>')
    _, console, requested = chromium(control, tmp_path / "p0", "--dump-dom")
    assert "boom" in console and requested == {"https://example.invalid/x.png"}

    report = write_report(filmed)
    shot = tmp_path / "report.png"
    _, console, requested = chromium(report, tmp_path / "p1", "--window-size=1200,2400", f"--screenshot={shot}")
    assert console == "" and requested == set()
    assert shot.stat().st_size > 20_000  # charts and video posters, not a blank page

    # a copy beside the report (same relative paths) with a script that plays the first video
    probe = report.with_name("probe.html")
    probe.write_text(report.read_text().replace("</body>", PLAY_FIRST_VIDEO + "</body>"))
    for attempt in range(3):
        dom, console, requested = chromium(probe, tmp_path / f"p2-{attempt}", "--autoplay-policy=no-user-gesture-required",
                                           "--virtual-time-budget=30000", "--dump-dom")
        title = re.findall(r"<title>([^<]*)</title>", dom)
        # an unchanged title is no verdict (once, on a loaded machine, the dump came before any
        # media event); an error or a refusal is one
        if title != [report_title(report)]:
            break
    assert title == ["playing 32x32"], title
    assert dom.count("<svg") == 3 and dom.count("<video") == 6
    assert console == "" and requested == set()
