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

from conftest import load_info
from helpers_report import mt10, offline_problems, outcomes, task, write_info
from rollbench.errors import ConfigError
from rollbench.report import compare_main, compare_runs, load_run, stats
from rollbench.report.stats import Paired

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
        # the same book, ch. 8, paired (Cavo et al. 2012): [[59, 6], [16, 80]], difference -0.0621
        (lambda: stats.newcombe_paired(Paired(both=59, only_a=16, only_b=6, neither=80)), (-0.1186, -0.0046)),
    ],
    ids=["newcombe-56of70-48of80", "newcombe-7of34-1of34", "newcombe-paired-cavo"],
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
    assert cmp.overall.verdict == "worse" and cmp.overall.paired is not None and cmp.overall.p < 1e-6
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
    # paired: the long task's 10 discordant pairs (all won by B) carry the variance
    se = 100 * math.sqrt((10 / 50 - (10 / 50) ** 2) / 50) / 2
    assert cmp.overall.ci == pytest.approx((10.0 - 1.959963984540054 * se, 10.0 + 1.959963984540054 * se))
    assert cmp.overall.test == "z, mean of task rates"
    assert any("mean of the tasks' rates" in note for note in cmp.notes)
    assert compare_main([str(tmp_path / "a"), str(tmp_path / "b")], {}) == 0
    out = capsys.readouterr().out
    assert "B - A +10.0 points" in out
    # equal lengths: the pooled comparison, as eval_info's overall (unchanged)
    write_info(tmp_path / "c", [task("short", short, range(10), task_id=0), task("long", a_long[:10], range(100, 110), task_id=1)])
    same = compare_runs(load_run(str(tmp_path / "c"), "A"), load_run(str(tmp_path / "c"), "B"))
    assert same.overall.test == "exact McNemar" and same.overall.a.k == 20
