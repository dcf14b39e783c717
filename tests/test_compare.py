"""`rollbench compare`: its numbers against hand-computed and published values, then real runs."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, fisher_exact, hypergeom
from scipy.stats import t as t_dist

from conftest import load_info
from helpers_report import mt10, offline_problems, outcomes, task, write_info
from rollbench import stats
from rollbench.errors import ConfigError
from rollbench.report import compare, compare_main, compare_runs, load_run
from rollbench.report.runs import Episode, LoadedRun, TaskResult
from rollbench.stats import Paired

# -- the statistics, against values computed by hand or published ------------------


def test_exact_mcnemar_b1_c9():
    # 10 discordant pairs split 1:9; under no difference b ~ Bin(10, 1/2): p = 2 * P(b <= 1) = 2 * 11/1024
    assert stats.mcnemar_exact(Paired(both=7, only_a=1, only_b=9, neither=3)) == pytest.approx(22 / 1024, abs=1e-12)
    assert stats.fmt_p(22 / 1024) == "0.021"
    assert stats.mcnemar_exact(Paired(5, 0, 0, 5)) == 1.0  # nothing discordant: nothing to test


def boschloo_by_brute_force(k_a: int, n_a: int, k_b: int, n_b: int, grid: int = 4001) -> float:
    """Boschloo (1970) from its definition: order the tables by their two-sided Fisher p, and
    take the largest probability, over the common success rate, of a table at least as extreme."""
    fisher = np.empty((n_a + 1, n_b + 1))
    for s in range(n_a + n_b + 1):  # tables with s successes in all share one hypergeometric law
        xs = np.arange(max(0, s - n_b), min(n_a, s) + 1)
        pmf = hypergeom.pmf(xs, n_a + n_b, s, n_a)
        for x, px in zip(xs, pmf, strict=True):
            fisher[x, s - x] = pmf[pmf <= px * (1 + 1e-7)].sum()
    extreme = fisher <= fisher[k_a, k_b] * (1 + 1e-7)
    best = 0.0
    for pi in np.linspace(0, 1, grid):
        best = max(best, float(np.outer(binom.pmf(np.arange(n_a + 1), n_a, pi), binom.pmf(np.arange(n_b + 1), n_b, pi))[extreme].sum()))
    return best


def test_40_of_50_vs_30_of_50_boschloo_and_fisher(monkeypatch):
    """Fisher's p is 0.0486 (≈ 0.049). Boschloo's is 0.0352, from scipy and from its definition
    computed here by brute force; the 0.031 quoted in issue 15 is not Boschloo's (a z-test gives 0.029)."""
    test, p = stats.unpaired_test(40, 50, 30, 50)
    assert test == "Boschloo"
    assert p == pytest.approx(0.0352, abs=1e-4)
    assert p == pytest.approx(boschloo_by_brute_force(40, 50, 30, 50), abs=1e-5)
    assert p < 0.0486  # Boschloo is never less powerful than Fisher
    monkeypatch.setattr(stats, "BOSCHLOO_MAX_TABLES", 0)  # the path taken for huge tables
    test, p = stats.unpaired_test(40, 50, 30, 50)
    assert (test, round(p, 4)) == ("Fisher", 0.0486)


@pytest.mark.parametrize(
    "interval, published",
    [  # Newcombe (1998) Stat Med 17:873, method 10, example (a): 56/70 vs 48/80
        (lambda: stats.newcombe_unpaired(48, 80, 56, 70), (0.0524, 0.3339)),
        # Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables, ch. 4: 7/34 vs 1/34
        (lambda: stats.newcombe_unpaired(1, 34, 7, 34), (0.0189, 0.3404)),
    ],
    ids=["newcombe-56of70-48of80", "newcombe-7of34-1of34"],
)
def test_newcombe_intervals_match_published_values(interval, published):
    lo, hi = interval()
    assert (round(lo, 4), round(hi, 4)) == published


def test_holm_adjusts_step_down():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.02, 0.3]) == pytest.approx([0.04, 0.3])
    assert stats.holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1


def test_episodes_needed_have_the_power_they_claim():
    rng = np.random.default_rng(0)
    # paired: exact power at the returned n reaches 80%, one fewer does not (or is the sawtooth's dip)
    t = Paired(both=0, only_a=5, only_b=20, neither=75)
    n = stats.episodes_needed_paired(t, 0.05)
    assert n is not None and stats.mcnemar_power(n, 0.05, 0.2, 0.05) >= 0.8 > stats.mcnemar_power(n - 1, 0.05, 0.2, 0.05)
    tables = rng.multinomial(n, [0.0, 0.05, 0.2, 0.75], size=2000)
    simulated = np.mean([stats.mcnemar_exact(Paired(*map(int, row))) < 0.05 for row in tables])
    assert simulated == pytest.approx(0.8, abs=0.03)
    # unpaired: 60% vs 80% needs 91 per arm (Fleiss, with continuity correction). Fisher's exact
    # power there, summed over every outcome, is 0.81; Boschloo's is at least Fisher's
    n = stats.episodes_needed_unpaired(0.6, 0.8, 0.05)
    assert n == 91
    pa, pb = binom.pmf(np.arange(n + 1), n, 0.6), binom.pmf(np.arange(n + 1), n, 0.8)
    likely = [(a, b) for a in range(n + 1) for b in range(n + 1) if pa[a] * pb[b] > 1e-12]
    power = sum(pa[a] * pb[b] for a, b in likely if fisher_exact([[a, b], [n - a, n - b]]).pvalue < 0.05)
    assert 0.8 <= power < 0.85
    assert stats.episodes_needed_unpaired(0.7, 0.7, 0.05) is None
    assert stats.episodes_needed_paired(Paired(3, 2, 2, 3), 0.05) is None


# -- compare_main on eval_info files written here ------------------------------------


def test_paired_b1_c9_is_exact_mcnemar_and_b_better(tmp_path, capsys):
    a, b = outcomes(n_both=7, n_only_a=1, n_only_b=9, n_neither=3)
    seeds = list(range(1000, 1020))
    write_info(tmp_path / "a", [task("t", a, seeds)])
    write_info(tmp_path / "b", [task("t", b, seeds)])
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {"fail-if-worse": "true"}) == 0
    out = capsys.readouterr().out
    assert "McNemar (20 pairs)" in out and "0.021" in out
    assert "B is better than A overall" in out
    # the other way round B is worse: the gate fails
    assert compare_main([str(tmp_path / "b"), str(tmp_path / "a")], {"fail_if_worse": "true"}) == 1
    assert "B is worse than A overall" in capsys.readouterr().out


def test_lerobot_eval_files_are_unpaired_unless_seeds_are_given(tmp_path, capsys):
    """lerobot-eval writes no seeds, no config, no versions: Boschloo, and notes that say so."""
    write_info(tmp_path / "a", [task("t", [True] * 40 + [False] * 10)])
    write_info(tmp_path / "b", [task("t", [True] * 30 + [False] * 20)])
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {}) == 0  # no gate asked for
    out = capsys.readouterr().out
    assert "Boschloo" in out and "0.035" in out and "B is worse than A" in out
    assert "records no package versions or config" in out and "--seed_b=SEED" in out
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {"fail-if-worse": "true"}) == 1
    capsys.readouterr()
    # told the seeds, the same files pair up (here the first 30 episodes agree, 10 differ one way)
    assert compare_main([str(tmp_path / "a" / "eval_info.json"), str(tmp_path / "b")], {"seed_a": "7", "seed_b": "7"}) == 0
    out = capsys.readouterr().out
    assert "McNemar (50 pairs)" in out and "--seed_b" not in out


def test_warnings_name_what_differs(tmp_path):
    def config(length: int) -> dict:
        return {"env": {"type": "fake", "task": "all", "episode_length": length}, "policy": {"type": "expert"}, "seed": 0}

    write_info(tmp_path / "a", [task("t", [True] * 10, range(10), [30] * 5 + [200] * 5), task("u", [True] * 3, range(3), group="g", task_id=1)],
               config=config(200), versions={"rollbench": "0.1.0", "metaworld": "3.1.1"}, n_planned=13)
    write_info(tmp_path / "b", [task("t", [False] * 12, range(100, 112), [500] * 12)],
               config=config(500), versions={"rollbench": "0.1.0", "metaworld": "3.0.0"}, n_planned=12)
    cmp = compare_runs(load_run(str(tmp_path / "a"), "A"), load_run(str(tmp_path / "b"), "B"))
    text = "\n".join(cmp.warnings)
    assert "tasks only in A, left out: u" in text
    assert "metaworld 3.1.1 (A) vs 3.0.0 (B)" in text and "rollbench 0.1.0" not in text
    assert "env.episode_length: 200 (A) vs 500 (B)" in text
    assert "failed episodes last up to" not in text  # A has no failure to measure its limit by
    assert "episode counts differ on 1 of 1 tasks (e.g. t: A 10, B 12)" in text
    assert "seeds differ on 1 of 1 tasks (e.g. t: A 0..9, B 100..111)" in text
    assert cmp.tasks[0].paired is None and cmp.tasks[0].test == "Boschloo"


@pytest.mark.parametrize(
    "positional, flags, words",
    [
        (["only-one"], {}, ["takes two runs", "got 1"]),
        (["{tmp}/nowhere", "{tmp}/b"], {}, ["rollbench compare A='", "nowhere", "does not exist"]),
        (["{tmp}/empty", "{tmp}/b"], {}, ["holds no eval_info.json"]),
        (["{tmp}/a", "{tmp}/b"], {"alpha": "2"}, ["--alpha='2'", "between 0 and 1"]),
        (["{tmp}/a", "{tmp}/b"], {"fail-if-wrose": "true"}, ["--fail-if-wrose", "Did you mean --fail-if-worse?"]),
        (["{tmp}/a", "{tmp}/b"], {"seed_b": "x"}, ["--seed_b='x'", "whole number"]),
        (["{tmp}/a", "{tmp}/b"], {"fail-if-worse": "maybe"}, ["--fail-if-worse='maybe'", "true or false"]),
        (["{tmp}/a", "{tmp}/other"], {}, ["share no task", "A: t;", "B: other/0"]),
        # /proc takes no new file, even from root (whom os.access tells every folder is writable)
        (["{tmp}/a", "{tmp}/b"], {"html": "/proc/x.html"}, ["--html='/proc/x.html'", "/proc takes no new file"]),
    ],
    ids=["one-arg", "missing", "no-eval-info", "alpha", "typo", "seed", "bool", "no-common-task", "html-unwritable"],
)
def test_bad_arguments_are_one_line_config_errors(tmp_path, positional, flags, words):
    write_info(tmp_path / "a", [task("t", [True, False], [1, 2])])
    write_info(tmp_path / "b", [task("t", [True, True], [1, 2])])
    write_info(tmp_path / "other", [task("x", [True], group="other")])  # lerobot-eval style: named by group/id
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as err:
        compare_main([p.format(tmp=tmp_path) for p in positional], flags)
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message, message


def test_html_page_is_self_contained(tmp_path, capsys):
    a, b = outcomes(2, 0, 8, 0)
    write_info(tmp_path / "a", [task("t", a, range(10)), task("u", b, range(10), task_id=1)])
    write_info(tmp_path / "b", [task("t", b, range(10)), task("u", a, range(10), task_id=1)])
    out = tmp_path / "cmp.html"
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {"html": str(out)}) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"comparison page: {out}")
    page = out.read_text()
    assert page.count("<svg") == 1 and "B - A per task" in page and "McNemar (10 pairs)" in page
    assert offline_problems(page) == []


# -- real runs through the real CLI ---------------------------------------------------


def test_fake_expert_vs_random_paired_and_gated(cli, tmp_path, capsys):
    for policy in ("expert", "random"):
        res = cli("eval", "--env.type=fake", f"--policy.type={policy}", "--eval.n_episodes=12", f"--output_dir={tmp_path / policy}")
        assert res.rc == 0, res.err
    rc = compare_main([str(tmp_path / "expert"), str(tmp_path / "random")], {"fail-if-worse": "true"})
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "B is worse than A overall" in out and "McNemar (36 pairs)" in out
    info = load_info(tmp_path / "random")
    assert f"{info['overall']['n_success']}/36" in out


@pytest.mark.slow
@pytest.mark.metaworld
def test_expert_vs_random_on_mt10(tmp_path_factory, capsys):
    """A clear difference wherever 10 episodes can show one, and no claim where they cannot.

    The random policy closes the drawer in 5 of 10 episodes of drawer-close-v3 (the expert:
    10 of 10), which McNemar puts at p = 0.0625: 10 episodes do not decide that task, so the
    verdict leaves it open and says how many would.
    """
    expert, random = mt10(tmp_path_factory, "expert"), mt10(tmp_path_factory, "random")
    rc = compare_main([str(expert), str(random)], {"fail-if-worse": "true"})
    out = capsys.readouterr().out
    assert rc == 1, out
    cmp = compare_runs(load_run(str(expert), "A"), load_run(str(random), "B"))
    # the seed is the independent unit: with 10 seeds, every seed's B - A below 0 is the least p, 2 / 2**10
    assert cmp.overall.verdict == "worse" and cmp.overall.paired is not None and cmp.overall.p <= 2 / 2**10 + 1e-12
    assert all(r.paired is not None and r.diff < 0 for r in cmp.tasks)
    for r in cmp.tasks:
        if r.verdict != "worse":  # undecided: the data could not support it, and the verdict says so
            assert r.verdict == "not significant" and r.p_adj >= 0.05 and r.needed is not None and r.needed > 10
    assert sum(r.verdict == "worse" for r in cmp.tasks) >= 9
    assert "B is worse than A overall" in out and "B is worse on" in out
    assert cmp.warnings == []


@pytest.mark.slow
@pytest.mark.metaworld
def test_two_expert_runs_with_different_seeds_differ_nowhere(tmp_path_factory, capsys):
    a, b = mt10(tmp_path_factory, "expert", seed=1000), mt10(tmp_path_factory, "expert", seed=2000)
    assert compare_main([str(a), str(b)], {"fail-if-worse": "true"}) == 0
    out = capsys.readouterr().out
    cmp = compare_runs(load_run(str(a), "A"), load_run(str(b), "B"))
    assert all(r.verdict in ("no difference", "not significant") for r in [cmp.overall, *cmp.tasks]), out
    assert all(r.paired is None for r in cmp.tasks)  # other seeds: other units
    assert "no significant difference on any of the 10 tasks" in out
    assert any(w.startswith("seeds differ on 10 of 10 tasks") for w in cmp.warnings)


@pytest.mark.slow
@pytest.mark.lerobot
@pytest.mark.pusht
def test_rollbench_vs_lerobot_eval_of_one_checkpoint_pairs_and_agrees(tmp_path, capsys):
    """Same checkpoint, same --seed: lerobot-eval records no seeds, --seed_b pairs its episodes."""
    pytest.importorskip("lerobot")
    pytest.importorskip("gym_pusht")
    from conftest import run_subprocess
    from lerobot_helpers import make_checkpoint
    from rollbench.benchmarks.pusht import PushTConfig

    ckpt = make_checkpoint(tmp_path / "ckpt", PushTConfig())
    flags = ["--env.type=pusht", "--env.episode_length=30", "--eval.n_episodes=4", "--eval.batch_size=2", "--seed=1000"]
    lerobot_eval = shutil.which("lerobot-eval", path=str(Path(sys.executable).parent))
    assert lerobot_eval, "lerobot-eval is installed with lerobot"
    with ThreadPoolExecutor(1) as pool:  # the two tools at once: independent processes
        theirs = pool.submit(subprocess.run, [lerobot_eval, f"--policy.path={ckpt}", "--policy.device=cpu",
                                              "--eval.use_async_envs=false", *flags,
                                              f"--output_dir={tmp_path / 'le'}"], capture_output=True, text=True, timeout=600)
        res = run_subprocess("eval", "--policy.type=lerobot", f"--policy.path={ckpt}", "--eval.mode=lockstep", *flags,
                             f"--output_dir={tmp_path / 'rb'}")
        proc = theirs.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res.rc == 0, res.err[-3000:]
    assert "seeds" not in json.loads((tmp_path / "le" / "eval_info.json").read_text())["per_task"][0]["metrics"]
    assert compare_main([str(tmp_path / "rb"), str(tmp_path / "le")], {"seed_b": "1000", "fail-if-worse": "true"}) == 0
    out = capsys.readouterr().out
    cmp = compare_runs(load_run(str(tmp_path / "rb"), "A"), load_run(str(tmp_path / "le"), "B", seed_start=1000))
    (row,) = cmp.tasks
    assert row.paired is not None and row.paired.n == 4 and row.paired.only_a == row.paired.only_b == 0, out
    assert row.verdict == "no difference" and math.isclose(row.p, 1.0)


def test_tasks_of_different_lengths_are_compared_as_the_mean_of_their_rates(tmp_path, capsys):
    """Adaptive runs stop tasks at different lengths: pooling would weigh the long task 5x.
    Here B gains 20 points on the 50-episode task only: the mean of the task differences is
    +10 points, where pooled counts would say +16.7."""
    short = [True] * 10
    a_long, b_long = [True] * 20 + [False] * 30, [True] * 30 + [False] * 20
    write_info(tmp_path / "a", [task("short", short, range(10), task_id=0), task("long", a_long, range(100, 150), task_id=1)])
    write_info(tmp_path / "b", [task("short", short, range(10), task_id=0), task("long", b_long, range(100, 150), task_id=1)])
    cmp = compare_runs(load_run(str(tmp_path / "a"), "A"), load_run(str(tmp_path / "b"), "B"))
    assert cmp.overall.a.pct == pytest.approx(70.0) and cmp.overall.b.pct == pytest.approx(80.0)
    assert cmp.overall.diff == pytest.approx(10.0)
    # paired: each task's variance of B - A at a shrunk share of discordant pairs ((d + 1)/(n + 2)),
    # so the short task (10/10 in both, no discordant pair) is not taken as known exactly, as the
    # plug-in did (variance 0); clustered on the seed (60 seeds: G/(G - 1), t with 59 df)
    long_task = (11 / 52 - (10 / 52) ** 2) / 50
    short_task = (1 / 12) / 10
    se = 100 * math.sqrt((long_task + short_task) / 4 * 60 / 59)
    half = t_dist.ppf(0.975, 59) * se
    assert cmp.overall.ci == pytest.approx((10.0 - half, 10.0 + half))
    assert cmp.overall.test == "t, mean of task rates"
    assert any("mean of the tasks' rates" in note for note in cmp.notes)
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {}) == 0
    out = capsys.readouterr().out
    assert "B - A +10.0 points" in out
    # equal lengths: the pooled comparison, as eval_info's overall (unchanged)
    write_info(tmp_path / "c", [task("short", short, range(10), task_id=0), task("long", a_long[:10], range(100, 110), task_id=1)])
    same = compare_runs(load_run(str(tmp_path / "c"), "A"), load_run(str(tmp_path / "c"), "B"))
    assert same.overall.test == "exact McNemar by seed" and same.overall.a.k == 20


# -- issue 47: adaptive runs, tasks that share seeds, intervals that agree with their tests --


def test_adaptive_runs_keep_each_run_s_overall_and_never_a_variance_of_zero(cli, tmp_path):
    """`--eval.ci_width` stops the expert's easy tasks at 10/10 and the random policy's at 0/10:
    the plug-in variance k/n(1 - k/n)/n is 0 there. compare reads each run's rule-aware
    rates and intervals from its eval_info.json, and its overall is the file's."""
    for policy in ("expert", "random"):
        res = cli("eval", "--env.type=fake", f"--policy.type={policy}", "--eval.ci_width=0.3", "--eval.n_episodes=40",
                  f"--output_dir={tmp_path / policy}")
        assert res.rc == 0, res.err
    info = {p: load_info(tmp_path / p) for p in ("expert", "random")}
    assert any(t["n_success"] in (0, t["n_episodes"]) for i in info.values() for t in i["per_task"])  # the case at issue
    for a, b in (("expert", "random"), ("expert", "expert"), ("random", "random")):
        cmp = compare_runs(load_run(str(tmp_path / a), "A"), load_run(str(tmp_path / b), "B"))
        for side, run in (("a", a), ("b", b)):
            overall = info[run]["overall"]
            assert getattr(cmp.overall, side).pct == pytest.approx(overall["pc_success"], abs=1e-9)
            assert getattr(cmp.overall, side).ci == pytest.approx(overall["pc_success_ci95"], abs=1e-9)
            for row, entry in zip(cmp.tasks, info[run]["per_task"], strict=True):  # the run's exact intervals
                assert getattr(row, side).ci == pytest.approx(entry["pc_success_ci95"], abs=1e-9)
                assert getattr(row, side).pct == pytest.approx(entry["stop"]["pc_success_unbiased"], abs=1e-9)
        for row in [*cmp.tasks, cmp.overall]:
            assert row.ci[1] - row.ci[0] > 5, (a, b, row)  # never a plug-in variance of 0
            assert row.ci[0] <= row.diff <= row.ci[1]
            assert (row.p < cmp.alpha) == (row.ci[0] > 0 or row.ci[1] < 0)  # the test and its interval agree
        if a == b:  # a run against itself: nothing to decide
            assert all(r.verdict == "no difference" and r.p == 1.0 for r in [*cmp.tasks, cmp.overall])


def test_two_adaptive_runs_on_their_own_seeds_take_each_run_s_variance(cli, tmp_path):
    """Two runs stopped by `--eval.ci_width` on disjoint seeds (nothing paired): compare's
    overall B - A is the difference of the files' overalls, with a variance no smaller than
    the sum of their own (each task's exact variance under the rule, the tasks' covariance
    clustered on the index). The plain clustered sum alone was smaller (22 false decisions
    in 300 pairs of runs of one policy, bench/pooled_cli.py; 16 with the files')."""
    flags = ("--env.type=fake", "--policy.type=expert", "--policy.action_noise=1.3", "--env.max_steps=16",
             "--eval.ci_width=0.2", "--eval.n_episodes=100")
    for name, seed in (("a", 1000), ("b", 9000)):
        res = cli("eval", *flags, f"--seed={seed}", f"--output_dir={tmp_path / name}")
        assert res.rc == 0, res.err
    cmp = compare_runs(load_run(str(tmp_path / "a"), "A"), load_run(str(tmp_path / "b"), "B"))
    assert all(row.paired is None for row in cmp.tasks)
    se = math.hypot(*(load_info(tmp_path / n)["overall"]["pc_success_se"] for n in ("a", "b")))
    seeds = {e.seed for n in ("a", "b") for t in load_run(str(tmp_path / n), n).tasks.values() for e in t.episodes}
    half = (cmp.overall.ci[1] - cmp.overall.ci[0]) / 2
    assert half >= float(t_dist.ppf(0.975, len(seeds) - 1)) * se - 1e-9


def _run(successes: np.ndarray, seed: int = 1000) -> LoadedRun:
    """A run held in memory: successes[t, i] is task t's episode i, run with seed + i."""
    tasks = {}
    for t, row in enumerate(successes):
        eps = tuple(Episode(i, bool(y), seed + i, None, None) for i, y in enumerate(row))
        tasks[("suite", t)] = TaskResult(("suite", t), f"t{t}", eps, 0)
    return LoadedRun(Path("eval_info.json"), {"per_task": []}, tasks)


def test_the_pooled_test_holds_its_level_when_tasks_share_seeds(monkeypatch):
    """Every task's episode i runs with seed + i, so outcomes at one index are correlated across
    tasks (here a latent per index and run: outcome correlation ~0.3 between tasks). A and B
    have the same rates and the same seeds; the pooled test must say better or worse in at
    most alpha of the comparisons (Monte Carlo error: 3 standard errors). Before issue 47 the
    pooled McNemar took the 10 x 30 pairs as independent: about 0.25."""
    from scipy.stats import binom as binomial
    from scipy.stats import norm

    # the per-task numbers are not what is tested here: sample sizes and intervals skipped, and
    # exact McNemar's p computed from the binomial's tail directly (the same p, 20 times faster)
    monkeypatch.setattr(compare, "_needed", lambda *args: None)
    monkeypatch.setattr(compare, "mcnemar_interval", lambda *args: (-1.0, 1.0), raising=False)
    monkeypatch.setattr(stats, "mcnemar_exact", lambda t: min(1.0, 2 * float(binomial.cdf(min(t.only_a, t.only_b), t.only_a + t.only_b, 0.5))))
    rng = np.random.default_rng(47)
    reps, tasks, seeds, rho = 600, 10, 30, 0.45  # latent correlation 0.45: outcomes ~0.3
    cut = norm.ppf(np.linspace(0.35, 0.8, tasks))[None, :, None]

    def draw() -> np.ndarray:
        latent = rng.standard_normal((reps, 1, seeds))  # one per index, shared by the tasks of a run
        noise = rng.standard_normal((reps, tasks, seeds))
        return np.sqrt(rho) * latent + np.sqrt(1 - rho) * noise < cut

    a, b = draw(), draw()
    x = a.astype(float)
    corr = np.mean([np.corrcoef(x[r])[np.triu_indices(tasks, 1)].mean() for r in range(50)])
    assert 0.2 < corr < 0.4
    decided = sum(compare_runs(_run(a[r]), _run(b[r])).overall.p < 0.05 for r in range(reps))
    assert compare_runs(_run(a[0]), _run(b[0])).overall.paired is not None
    rate = decided / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), rate


def test_the_sign_flip_test_of_one_task_is_exact_mcnemar():
    rng = np.random.default_rng(1)
    for _ in range(50):
        d = rng.choice([-1, 0, 1], size=int(rng.integers(1, 40)), p=[0.3, 0.4, 0.3])
        table = Paired(0, int((d < 0).sum()), int((d > 0).sum()), int((d == 0).sum()))
        assert stats.sign_flip_p(list(d)) == pytest.approx(stats.mcnemar_exact(table), abs=1e-12)
    # two seeds, each summed over two tasks to +2: P(S = +-4) = 2 * 1/4
    assert stats.sign_flip_p([2, 2]) == pytest.approx(0.5)
    assert stats.sign_flip_p([3, 1, 0]) == pytest.approx(0.5)  # S in {4, 2, -2, -4}, each 1/4: P(|S| >= 4)
    assert stats.sign_flip_p([3, -1, 0]) == 1.0  # observed 2: every |S| is at least 2


def test_zero_vs_five_discordant_of_twenty_interval_and_test_agree(tmp_path, capsys):
    """Exact McNemar p = 2 / 2**5 = 0.0625: not significant. Newcombe's interval beside it was
    [+3.3, +42.7], excluding 0; the exact conditional interval includes it."""
    a, b = outcomes(n_both=10, n_only_a=0, n_only_b=5, n_neither=5)
    write_info(tmp_path / "a", [task("t", a, range(20))])
    write_info(tmp_path / "b", [task("t", b, range(20))])
    cmp = compare_runs(load_run(str(tmp_path / "a"), "A"), load_run(str(tmp_path / "b"), "B"))
    (row,) = cmp.tasks
    assert row.p == pytest.approx(0.0625) and row.verdict == "not significant"
    assert row.ci[0] < 0 < row.ci[1], row.ci


def test_the_paired_interval_excludes_0_exactly_when_exact_mcnemar_rejects():
    """Every table of 20 pairs, at alpha 0.05 and 0.01, and its exact coverage >= 1 - alpha at
    a few discordance rates (summed over every table)."""
    from scipy.stats import multinomial

    n = 20
    for alpha in (0.05, 0.01):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                t = Paired(n - b - c, b, c, 0)
                lo, hi = stats.mcnemar_interval(t, alpha)
                assert lo <= (c - b) / n <= hi
                assert (stats.mcnemar_exact(t) < alpha) == (lo > 0 or hi < 0), (b, c, lo, hi)
    for p_a, p_b in ((0.05, 0.2), (0.1, 0.1), (0.0, 0.25), (0.3, 0.3), (0.15, 0.35)):
        cover = sum(multinomial.pmf([b, c, n - b - c], n, [p_a, p_b, 1 - p_a - p_b])
                    * (lambda ci: ci[0] <= p_b - p_a <= ci[1])(stats.mcnemar_interval(Paired(n - b - c, b, c, 0), 0.05))
                    for b in range(n + 1) for c in range(n + 1 - b))
        assert cover >= 0.95, (p_a, p_b, cover)


def test_a_second_opinion_from_statsmodels():
    """The same numbers from statsmodels on the same data: exact McNemar p, Clopper-Pearson and
    Wilson intervals, Newcombe's unpaired interval (tolerance 1e-9, floating point; statsmodels'
    Clopper-Pearson uses the same beta quantiles). The sign-flip test of one task is McNemar's."""
    pytest.importorskip("statsmodels")
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

    from rollbench.stats import wilson

    for b, c in ((0, 5), (1, 9), (3, 3), (7, 2), (12, 30), (0, 0)):
        t = Paired(10, b, c, 8)
        ref = mcnemar([[t.both, t.only_a], [t.only_b, t.neither]], exact=True).pvalue
        assert stats.mcnemar_exact(t) == pytest.approx(min(1.0, ref), abs=1e-9)
        d = [1] * c + [-1] * b + [0] * 18
        assert stats.sign_flip_p(d) == pytest.approx(min(1.0, ref), abs=1e-9)
    for k, n in ((0, 10), (5, 20), (20, 20), (37, 50), (1, 3)):
        for alpha in (0.05, 0.01):
            assert stats.clopper_pearson(k, n, alpha) == pytest.approx(proportion_confint(k, n, alpha, method="beta"), abs=1e-9)
        assert wilson(k, n) == pytest.approx(proportion_confint(k, n, 0.05, method="wilson"), abs=1e-9)
    for k_a, n_a, k_b, n_b in ((48, 80, 56, 70), (1, 34, 7, 34), (10, 10, 0, 10), (3, 12, 9, 15)):
        ref = confint_proportions_2indep(k_b, n_b, k_a, n_a, method="newcomb", compare="diff")
        assert stats.newcombe_unpaired(k_a, n_a, k_b, n_b) == pytest.approx(ref, abs=1e-9)
