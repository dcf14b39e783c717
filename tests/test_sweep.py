"""Robustness sweeps (--eval.perturb): every condition is the control's episodes perturbed, in
one run whose results do not depend on workers, placement, mode, or a kill and a resume;
the control keeps LeRobot's keys; bad input is one line before any episode."""

from __future__ import annotations

import json
import signal
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import load_info, per_episode, run_subprocess
from rollbench import perturb
from rollbench.config.codec import config_from_flags
from rollbench.episode.context import StepContext
from rollbench.plan import plan_for
from rollbench.policies.base import Policy
from rollbench.results.log import read_records
from test_resume import start_and_stop

SWEEP = ("--eval.perturb=action.noise=0,0.3,1.5;action.latency=2", "--eval.perturb=state.noise=0.4",
         "--eval.perturb=language.drop=1")
CONDITIONS = ["", "action.noise=0.3", "action.noise=1.5", "action.latency=2", "state.noise=0.4", "language.drop=1"]
BASE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=4", *SWEEP)


def every_episode(out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Every logged episode, control and conditions: key -> (condition, outcome)."""
    return {r.key: (r.condition, *r.outcome()) for r in read_records(out)}


def test_a_sweep_runs_every_condition_on_the_control_s_episodes_whatever_runs_it(tmp_path: Path) -> None:
    ways = {
        "worker": ("--workers=1",),
        "driver": ("--workers=2", "--policy.placement=driver"),
        "lockstep": ("--eval.mode=lockstep", "--eval.batch_size=3"),
        "in_process": ("--eval.mode=lockstep", "--eval.isolation=none", "--eval.batch_size=5"),
    }
    got = {}
    for name, flags in ways.items():
        out = tmp_path / name
        res = run_subprocess(*BASE, *flags, f"--output_dir={out}", timeout=300)
        assert res.rc == 0, (name, res.err)
        got[name] = every_episode(out)
    first = got["worker"]
    assert len(first) == 3 * 4 * len(CONDITIONS)
    for name, episodes in got.items():
        assert episodes == first, name
    info = load_info(tmp_path / "worker")
    # LeRobot's keys are the control's: the same as a run without the sweep
    plain = tmp_path / "plain"
    assert run_subprocess(*BASE[:4], "--workers=1", f"--output_dir={plain}").rc == 0
    assert per_episode(tmp_path / "worker") == per_episode(plain)
    assert info["overall"] == {**load_info(plain)["overall"], "eval_s": info["overall"]["eval_s"],
                               "eval_ep_s": info["overall"]["eval_ep_s"]}
    assert info["n_planned"] == len(first) and info["status"] == "complete"
    conds = info["per_condition"]
    assert [c["condition"] for c in conds] == CONDITIONS
    # the conditions ran on the control's seeds, and the perturbations are real: the big
    # action noise and the latency cost the expert episodes; what the expert ignores (the
    # instruction) costs nothing, pair by pair
    seeds = {c: sorted(s for (cond, _, _, _, _, _, s) in first.values() if cond == c) for c in CONDITIONS}
    assert all(seeds[c] == seeds[""] for c in CONDITIONS)
    by = {c["condition"]: c for c in conds}
    assert by["action.noise=1.5"]["vs_control"]["difference_pc"] < 0
    assert by["action.latency=2"]["vs_control"]["difference_pc"] < 0
    drop = by["language.drop=1"]["vs_control"]
    assert drop["only_control"] == drop["only_condition"] == 0 and drop["n_pairs"] == 12
    assert all(0 <= c["vs_control"]["p_holm"] <= 1 for c in conds[1:])
    assert conds[0]["n_success"] == info["overall"]["n_success"]
    for c in conds[1:]:  # sum rewards differ from the control's where the axis touches the episode
        mine = sorted(r[3] for r in first.values() if r[0] == c["condition"])
        control = sorted(r[3] for r in first.values() if r[0] == "")
        assert (mine == control) == (c["condition"] == "language.drop=1"), c["condition"]


def test_a_killed_sweep_resumes_to_the_unkilled_results(tmp_path: Path) -> None:
    slow = (*BASE, "--env.step_sleep_s=0.01", "--workers=1")
    whole = tmp_path / "whole"
    assert run_subprocess(*slow, f"--output_dir={whole}", timeout=300).rc == 0
    killed = tmp_path / "killed"
    rc, _, logged = start_and_stop(slow, killed, signal.SIGKILL, after_lines=20)
    assert rc == -signal.SIGKILL and logged < 72
    res = run_subprocess(*slow, f"--output_dir={killed}", timeout=300)
    assert res.rc == 0, res.err
    assert every_episode(killed) == every_episode(whole)
    a, b = load_info(killed), load_info(whole)
    assert a["per_condition"] == b["per_condition"]


def states_seen(spec: str, xs: list[float]) -> list[float]:
    """What a policy sees of the fake benchmark's state (its first coordinate) in the episode of
    the sweep `spec`'s one condition, the env's state at step t being (xs[t], 0)."""
    cfg = config_from_flags({"env.type": "fake", "policy.type": "expert", "eval.n_episodes": "1",
                             "eval.perturb": spec, "output_dir": "/nonexistent"})
    ctx = StepContext(cfg.env, cfg.policy, cfg.seed)
    seen: list[float] = []

    class Echo(Policy):
        def act(self, batch, slots):
            seen.append(float(batch["observation.state"][0][0]))
            return np.zeros((len(slots), 2))

    unit = next(u for u in plan_for(cfg) if u.condition)
    ctx.reset(Echo(), [0], [ctx.episode_start(unit)])
    for x in xs:
        ctx.act(Echo(), {"agent_pos": np.array([[x, 0.0]]), "environment_state": np.zeros((1, 4))}, [0], ["x"])
    return seen


def test_a_delay_of_k_steps_feeds_the_policy_the_observation_of_k_steps_before() -> None:
    assert states_seen("action.latency=3", [float(t) for t in range(8)]) == [0, 0, 0, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("flag,words", [
    ("--eval.perturb=action.nois=0.1", "--eval.perturb: unknown axis 'action.nois'. Did you mean 'action.noise'?"),
    ("--eval.perturb=action.noise=-1", "level -1 of action.noise is out of range; action.noise takes numbers from 0 to 100"),
    ("--eval.perturb=action.latency=1.5", "level 1.5 of action.latency is not a whole number of steps"),
    ("--eval.perturb=language.drop=2", "language.drop takes 0 or 1"),
    ("--eval.perturb=action.noise", "expected AXIS=LEVEL[,LEVEL...]"),
    ("--eval.perturb=action.noise=0.1,0.2&action.latency=1", "a crossed condition (AXIS=L&AXIS=L) takes one level per axis"),
])
def test_bad_sweeps_are_one_line_before_any_episode(tmp_path: Path, flag: str, words: str) -> None:
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", flag, f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2, res.err
    assert res.err.strip().splitlines() == [res.err.strip()], res.err
    assert words in res.err
    assert not (tmp_path / "o").exists()


def test_an_axis_the_benchmark_cannot_take_is_refused_before_any_episode(tmp_path: Path) -> None:
    res = run_subprocess("eval", "--env.type=gym", "--env.task=CartPole-v1", "--policy.type=random",
                         "--eval.perturb=action.noise=0.2", f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2, res.err
    assert "action.noise adds Gaussian noise to continuous actions" in res.err and "Discrete(2)" in res.err
    assert not (tmp_path / "o").exists()


def test_tune_refuses_an_axis_the_benchmark_cannot_take_in_eval_s_words(tmp_path: Path) -> None:
    """`rollbench tune` checks the benchmark as eval does (`lifecycle.check_benchmark`) before
    its probe: one line, exit 2 (it was the probe process's failure, exit 1)."""
    res = run_subprocess("tune", "--env.type=gym", "--env.task=CartPole-v1", "--policy.type=random",
                         "--eval.perturb=action.noise=0.2", "--tune.budget_s=3", f"--tune.output={tmp_path / 'tune.json'}",
                         timeout=60)
    assert res.rc == 2 and len(res.err.strip().splitlines()) == 1, res.err
    assert ("--eval.perturb: action.noise adds Gaussian noise to continuous actions; the actions of --env.type=gym are "
            "Discrete(2)") in res.err, res.err
    assert not (tmp_path / "tune.json").exists()


def test_a_delay_of_k_steps_delays_the_first_action_of_every_new_chunk_by_k_steps() -> None:
    """A chunking policy (a chunk of 4, planned on the observation it is given) under a delay
    of 3: every chunk is planned on the observation of 3 steps before the step that executes
    its first action, which is what a robot sees when inference takes 3 control steps while
    the previous chunk's last actions run on (real-time chunking, docs/robustness.md)."""
    cfg = config_from_flags({"env.type": "fake", "policy.type": "expert", "eval.n_episodes": "1",
                             "eval.perturb": "action.latency=3", "output_dir": "/nonexistent"})
    ctx = StepContext(cfg.env, cfg.policy, cfg.seed)

    class Chunks(Policy):
        """Each action names the observation its chunk was planned on and its place in the chunk."""

        def reset(self, slots, episodes):
            self.queue: list[np.ndarray] = []

        def act(self, batch, slots):
            if not self.queue:
                seen = float(batch["observation.state"][0][0])
                self.queue.extend(np.array([[seen, j]]) for j in range(4))
            return self.queue.pop(0)

    unit = next(u for u in plan_for(cfg) if u.condition == "action.latency=3")
    policy = Chunks()
    ctx.reset(policy, [0], [ctx.episode_start(unit)])
    executed = [ctx.act(policy, {"agent_pos": np.array([[float(t), 0.0]]), "environment_state": np.zeros((1, 4))}, [0], ["x"])[0]
                for t in range(16)]
    firsts = [(t, planned_on) for t, (planned_on, j) in enumerate(executed) if j == 0]
    assert [t for t, _ in firsts] == [0, 4, 8, 12]
    assert firsts[0] == (0, 0)  # the first chunk: nothing older than the first observation
    assert all(t - planned_on == 3 for t, planned_on in firsts[1:])


def test_the_chunking_expert_holds_each_planned_action(tmp_path: Path) -> None:
    """--policy.chunk_size=N: the expert's action on a chunk's first observation, N times;
    chunk 1 is the expert as it always was; 0 is one line."""
    runs = {}
    for n in (1, 4):
        out = tmp_path / f"c{n}"
        assert run_subprocess(*BASE[:4], f"--policy.chunk_size={n}", "--workers=1", f"--output_dir={out}").rc == 0
        runs[n] = per_episode(out)
    plain = tmp_path / "plain"
    assert run_subprocess(*BASE[:4], "--workers=1", f"--output_dir={plain}").rc == 0
    assert per_episode(plain) == runs[1] != runs[4]
    res = run_subprocess(*BASE[:4], "--policy.chunk_size=0", f"--output_dir={tmp_path / 'bad'}")
    assert res.rc == 2 and "--policy.chunk_size=0 is not allowed; it must be a whole number >= 1" in res.err, res.err


SWEEP_JSON = {"axes": {"action.noise": [0.3, 1.5]}, "grid": {"action.latency": [0, 2], "state.noise": [0, 0.4]},
              "conditions": [{"action.noise": 0.3, "language.drop": 1}]}
SWEEP_TOML = """
[axes]
"action.noise" = [0.3, 1.5]

[grid]  # every combination
"action.latency" = [0, 2]
"state.noise" = [0, 0.4]

[[conditions]]
"action.noise" = 0.3
"language.drop" = 1
"""
FILE_CONDITIONS = ["", "action.noise=0.3", "action.noise=1.5", "state.noise=0.4", "action.latency=2",
                   "action.latency=2&state.noise=0.4", "action.noise=0.3&language.drop=1"]


def test_a_sweep_file_crosses_axes_and_its_run_is_the_flag_s(tmp_path: Path) -> None:
    """A sweep file (JSON or TOML): axes one at a time, a grid of every combination, listed
    conditions; its run is the run of the same --eval.perturb spec, and records the spec."""
    (tmp_path / "s.json").write_text(json.dumps(SWEEP_JSON))
    (tmp_path / "s.toml").write_text(SWEEP_TOML)
    assert [c.id for c in perturb.parse(perturb.sweep_file(str(tmp_path / "s.json")))] == FILE_CONDITIONS
    assert perturb.sweep_file(str(tmp_path / "s.toml")) == perturb.sweep_file(str(tmp_path / "s.json"))
    common = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=3", "--workers=1")
    res = run_subprocess(*common, f"--eval.sweep={tmp_path / 's.toml'}", f"--output_dir={tmp_path / 'file'}")
    assert res.rc == 0, res.err
    spec = "action.noise=0.3,1.5;action.latency=2&state.noise=0.4;state.noise=0.4;action.latency=2;language.drop=1&action.noise=0.3"
    res = run_subprocess(*common, f"--eval.perturb={spec}", f"--output_dir={tmp_path / 'flag'}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path / "file")
    assert sorted(c["condition"] for c in info["per_condition"]) == sorted(FILE_CONDITIONS)
    crossed = next(c for c in info["per_condition"] if c["condition"] == "action.latency=2&state.noise=0.4")
    assert crossed["axes"] == {"action.latency": 2.0, "state.noise": 0.4}
    by_cond = {}
    for run in ("file", "flag"):
        by_cond[run] = {(r.condition, r.task, r.seed): r.outcome() for r in read_records(tmp_path / run)}
    assert by_cond["file"] == by_cond["flag"]
    assert ";" not in "".join(k[0] for k in by_cond["file"])
    # the run recorded the spec, not the file: a rerun of its config needs no file
    assert "action.latency=2&state.noise=0.4" in load_info(tmp_path / "file")["config"]["eval"]["perturb"]


def test_crossed_axes_apply_together() -> None:
    assert perturb.parse("action.latency=2&state.noise=0.5")[1].id == "action.latency=2&state.noise=0.5"
    seen = states_seen("action.latency=2&state.noise=0.5", [10.0 * t for t in range(6)])
    delayed = [0, 0, 0, 10, 20, 30]
    assert all(abs(s - d) < 3 for s, d in zip(seen, delayed, strict=True)) and seen != delayed


def test_levels_are_exact_in_ids_and_ordinary_ones_keep_their_spelling() -> None:
    """A level is spelled exactly in its condition's id (`%g` rounded 0.1234567 and 0.1234568
    to one id); the levels runs used before keep the spelling they had, so their ids, and
    resume of their runs, are unchanged."""
    ids = [c.id for c in perturb.parse("action.noise=0.1234567,0.1234568,0.1,1,1e-05,2.5;action.latency=2;"
                                       "image.brightness=0.5&state.noise=0.05")]
    assert ids == ["", "action.noise=0.1234567", "action.noise=0.1234568", "action.noise=0.1", "action.noise=1",
                   "action.noise=1e-05", "action.noise=2.5", "action.latency=2", "state.noise=0.05&image.brightness=0.5"]
    for cid in ids[1:]:
        assert perturb.condition(cid).id == cid


@given(st.sampled_from(sorted(perturb.AXES)), st.floats(0, 1, allow_nan=False), st.floats(0, 1, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_two_levels_are_two_ids_and_an_id_reads_back_as_its_level(axis: str, a: float, b: float) -> None:
    spec = perturb.AXES[axis]
    a, b = (round(x * spec.high) if spec.integer else x * spec.high for x in (a, b))
    conds = [perturb.Condition.of({axis: float(x)}) for x in (a, b)]
    assert (conds[0].id == conds[1].id) == (float(a) == float(b))
    for cond in conds:
        assert perturb.condition(cond.id) == cond


def test_two_levels_that_round_alike_are_two_conditions_of_their_own(tmp_path: Path) -> None:
    """Each row of per_condition counts its own episodes (with 6-digit ids the two conditions
    were one: both ran at the rounded level and each row counted both, 18 where 9 ran)."""
    out = tmp_path / "o"
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=3", "--workers=1",
                         "--eval.perturb=action.noise=0.1234567,0.1234568", f"--output_dir={out}", timeout=300)
    assert res.rc == 0, res.err
    conds = load_info(out)["per_condition"]
    assert [c["condition"] for c in conds] == ["", "action.noise=0.1234567", "action.noise=0.1234568"]
    assert [c["n_episodes"] for c in conds] == [9, 9, 9]
    assert [c["axes"] for c in conds[1:]] == [{"action.noise": 0.1234567}, {"action.noise": 0.1234568}]
    logged = [r.condition for r in read_records(out)]
    assert sorted(logged) == sorted(c["condition"] for c in conds for _ in range(9))


def test_conditions_that_share_an_axis_level_share_its_draws(tmp_path: Path) -> None:
    """Common random numbers: `action.noise=1` and `action.noise=1&language.drop=1` add the same
    noise to the same episode, so a policy that ignores language (the expert) scores the same
    in both, episode by episode; so do the state noise and the native axes' reset draws."""
    out = tmp_path / "o"
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=6", "--workers=1",
                         "--eval.perturb=action.noise=1;action.noise=1&language.drop=1;"
                         "state.noise=0.4&action.latency=2;action.latency=2&state.noise=0.4&language.drop=1",
                         f"--output_dir={out}", timeout=300)
    assert res.rc == 0, res.err
    by: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]] = {}
    for r in read_records(out):
        by.setdefault(r.condition, {})[(r.task, r.seed)] = r.outcome()
    assert len(by) == 5 and all(len(v) == 18 for v in by.values())
    assert by["action.noise=1"] == by["action.noise=1&language.drop=1"] != by[""]
    assert by["action.latency=2&state.noise=0.4"] == by["action.latency=2&state.noise=0.4&language.drop=1"] != by[""]
    # the same, draw by draw, where the Perturber applies them
    for crossed in ("action.noise=0.5&action.latency=3&language.drop=1", "action.noise=0.5&state.noise=0.1&image.blur=1"):
        a, b = (perturb.Perturber(perturb.parse(spec)[1], 11, None) for spec in ("action.noise=0.5", crossed))
        for _ in range(4):
            assert np.array_equal(a.outputs(np.zeros(3)), b.outputs(np.zeros(3)))
            a.advance({})
            b.advance({})
    row = {"observation.state": np.ones(2)}
    for step in range(4):
        alone = perturb.Sensor(perturb.parse("state.noise=0.5")[1], 11)(row, step)
        crossed_ = perturb.Sensor(perturb.parse("action.noise=0.2&state.noise=0.5&language.drop=1")[1], 11)(row, step)
        assert np.array_equal(alone["observation.state"], crossed_["observation.state"])
    for axis in ("camera.shift", "camera.rotate", "object.shift"):
        single = perturb.reset_stream(3, f"{axis}=0.05", axis).random(4)
        assert np.array_equal(single, perturb.reset_stream(3, f"{axis}=0.05&light.intensity=0.5&action.noise=1", axis).random(4))
        assert not np.array_equal(single, perturb.reset_stream(3, f"{axis}=0.06", axis).random(4))


def test_a_one_axis_condition_draws_what_it_drew_before_draws_were_per_axis() -> None:
    """A one-axis condition's key is its id, as when draws were keyed by the whole condition:
    a run made before resumes to the same episodes."""
    def old(seed: int, cid: str, axis: str, step: int) -> np.random.Generator:
        return np.random.default_rng([seed, zlib.crc32(cid.encode()), zlib.crc32(axis.encode()), step])

    p = perturb.Perturber(perturb.parse("action.noise=0.3")[1], 7, None)
    p.advance({})
    assert np.array_equal(p.outputs(np.zeros(4)), old(7, "action.noise=0.3", "action.noise", 1).normal(0.0, 0.3, 4))
    state = perturb.Sensor(perturb.parse("state.noise=0.05")[1], 7)({"observation.state": np.zeros(3)}, 2)
    assert np.array_equal(state["observation.state"], old(7, "state.noise=0.05", "state.noise", 2).normal(0.0, 0.05, 3))
    assert perturb.reset_stream(9, "camera.rotate=10", "camera.rotate").random() == \
        old(9, "camera.rotate=10", "camera.rotate", 0).random()


def test_resuming_with_another_sweep_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    first = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=2", f"--output_dir={out}")
    assert run_subprocess(*first, "--eval.perturb=action.noise=0.3").rc == 0
    res = run_subprocess(*first, "--eval.perturb=state.noise=0.4")
    assert res.rc == 2 and "conditions" in res.err and "--output_dir" in res.err, res.err


@pytest.mark.parametrize("content,words", [
    (None, "cannot read it"),
    ("{not json", "not valid JSON"),
    ('{"axis": {"action.noise": [0.1]}}', "expected a table with axes, grid, conditions; got ['axis']"),
    ('{"axes": {"action.nosie": [0.1]}}', "unknown axis 'action.nosie'. Did you mean 'action.noise'?"),
    ('{"grid": {"action.noise": ["a"]}}', "grid.action.noise = ['a']; expected a number or a list of numbers"),
    ('{"conditions": [{"action.latency": 1.5}]}', "level 1.5 of action.latency is not a whole number"),
])
def test_a_bad_sweep_file_is_one_line_naming_it(tmp_path: Path, content: str | None, words: str) -> None:
    path = tmp_path / "sweep.json"
    if content is not None:
        path.write_text(content)
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", f"--eval.sweep={path}",
                         f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2, res.err
    assert res.err.strip().splitlines() == [res.err.strip()], res.err
    assert f"--eval.sweep={path}" in res.err and words in res.err, res.err
    assert not (tmp_path / "o").exists()


PARAPHRASES = {"near": ["go to the close target", "reach it"], "reach a mid target": ["move to the middle goal", "mid"],
               "far": ["head for the distant target", "far one, please"]}


def test_paraphrases_replace_the_instruction_wherever_the_policy_runs(tmp_path: Path) -> None:
    """language.paraphrase=k: every episode's reset and every call get the task's k-th
    paraphrase (by task name or instruction), in the workers as in the driver; the table is
    read once into the run's config."""
    (tmp_path / "p.json").write_text(json.dumps(PARAPHRASES))
    common = ("eval", "--env.type=fake", "--policy.type=module", "--policy.path=helpers_sweep_policies:instruction_driven",
              "--eval.n_episodes=2", "--eval.perturb=language.paraphrase=1,2;language.drop=1")
    got = {}
    for name, flags in {"workers": ("--workers=2", f"--eval.paraphrases={tmp_path / 'p.json'}", "--eval.max_episodes_rendered=1",
                                    "--eval.report=true"),
                        "here": ("--eval.mode=lockstep", "--eval.isolation=none", f"--eval.paraphrases={json.dumps(PARAPHRASES)}")
                        }.items():
        res = run_subprocess(*common, *flags, f"--output_dir={tmp_path / name}", timeout=300)
        assert res.rc == 0, res.err
        got[name] = every_episode(tmp_path / name)
    assert got["workers"] == got["here"]
    rewards = {c: sorted(v[3] for v in got["workers"].values() if v[0] == c)
               for c in ("", "language.paraphrase=1", "language.paraphrase=2", "language.drop=1")}
    assert len({tuple(r) for r in rewards.values()}) == 4, rewards  # four instructions, four sets of episodes
    config = load_info(tmp_path / "workers")["config"]["eval"]
    assert json.loads(config["paraphrases"]) == PARAPHRASES
    # the report's still of each language condition says what the policy was told
    page = (tmp_path / "workers" / "report.html").read_text()
    assert any(f"instruction: “{p[0]}”" in page for p in PARAPHRASES.values()) and "<br>no instruction" in page


@pytest.mark.parametrize("flags,words", [
    (("--eval.perturb=language.paraphrase=1",), "language.paraphrase needs --eval.paraphrases=FILE"),
    (("--eval.perturb=language.paraphrase=3", f"--eval.paraphrases={json.dumps(PARAPHRASES)}"),
     "language.paraphrase=3 needs at least 3 paraphrases of task 'near' ('reach a near target') in --eval.paraphrases; it has 2 paraphrases"),
    (("--eval.perturb=language.paraphrase=1", '--eval.paraphrases={"near": "one"}'), "expected a table of a task's name"),
    (("--eval.perturb=language.paraphrase=1", "--eval.paraphrases=/nonexistent.json"), "--eval.paraphrases=/nonexistent.json: cannot read it"),
])
def test_bad_paraphrases_are_one_line_before_any_episode(tmp_path: Path, flags: tuple[str, ...], words: str) -> None:
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=expert", *flags, f"--output_dir={tmp_path / 'o'}", timeout=60)
    assert res.rc == 2, res.err
    assert res.err.strip().splitlines() == [res.err.strip()], res.err
    assert words in res.err, res.err
    assert not (tmp_path / "o").exists()


def test_a_sharded_sweep_is_the_one_process_sweep(tmp_path: Path) -> None:
    """--eval.num_shards=2 --executor=shards: the shards split the conditions' units between them;
    the merged run has every condition's episodes and the same per_condition."""
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    assert run_subprocess(*BASE, "--workers=1", f"--output_dir={one}", timeout=300).rc == 0
    res = run_subprocess(*BASE, "--eval.num_shards=2", "--executor=shards", f"--output_dir={sharded}", timeout=300)
    assert res.rc == 0, res.err
    both = {}
    for name, out in (("one", one), ("sharded", sharded)):
        both[name] = {(r.condition, r.task, r.seed): r.outcome() for r in read_records(out, recursive=True)}
    assert len(both["sharded"]) == 3 * 4 * len(CONDITIONS) and both["sharded"] == both["one"]
    assert load_info(sharded)["per_condition"] == load_info(one)["per_condition"]
