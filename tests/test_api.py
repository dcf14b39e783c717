"""`rollbench.Evaluator`: a policy object in memory evaluated from Python gives the episodes
`rollbench eval` gives on the same seeds, each call one complete run of its own, and bad input
is the CLI's one-line error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rollbench
from conftest import assert_same_per_episode, load_info, per_episode, subprocess_env
from helpers_policies import steer, toward_block
from helpers_sched import per_task_counter_policy
from rollbench.errors import ConfigError

QUIET = {"eval.max_episodes_rendered": 0}  # as the `cli` fixture runs the CLI: no videos


def evaluator(out: Path, env: str = "fake", **kw: Any) -> rollbench.Evaluator:
    return rollbench.Evaluator(env, out, progress=False, flags={**QUIET, **kw.pop("flags", {})}, **kw)


def api_per_episode(result: rollbench.EvalResult) -> dict[tuple[str, int, int], tuple[Any, ...]]:
    """The result's own records, keyed and shaped as conftest's `per_episode` reads eval_info.json."""
    return {(r.task_group, r.task_id, r.episode_index): (r.success, r.sum_reward, r.max_reward, r.n_steps, r.seed)
            for r in result.episodes}


@pytest.mark.parametrize("factory, mode", [
    ("steer", "continuous"),  # a per-slot policy: continuous batching, the policy in this process
    ("per_task_counter_policy", "lockstep"),  # per_slot_state = False: lockstep, as lerobot-eval runs it
])
def test_the_api_gives_the_cli_s_episodes_on_the_fake_benchmark(cli, tmp_path: Path, factory: str, mode: str) -> None:
    module = "helpers_sched" if factory == "per_task_counter_policy" else "helpers_policies"
    res = cli("eval", "--env.type=fake", "--eval.n_episodes=5", "--seed=77", "--workers=2", "--policy.type=module",
              f"--policy.path={module}:{factory}", f"--output_dir={tmp_path / 'cli'}")
    assert res.rc == 0, res.err
    policy = steer() if factory == "steer" else per_task_counter_policy()
    with evaluator(tmp_path / "api", workers=2) as ev:
        result = ev.evaluate(policy, n_episodes=5, seed=77, name="step-0")
    assert result.output_dir == tmp_path / "api" / "step-0"
    assert result.info["mode"] == load_info(tmp_path / "cli")["mode"] == mode
    cli_episodes = per_episode(tmp_path / "cli")
    assert per_episode(result.output_dir) == cli_episodes  # bit for bit: success, rewards, steps, seed
    assert api_per_episode(result) == cli_episodes
    assert len(result.episodes) == 15 and result.ran == 15 and result.ok
    successes = {s for s, *_ in cli_episodes.values()}
    assert successes == {True, False} or factory != "steer"  # the comparison sees both outcomes
    # the rates and intervals are eval_info.json's, the CLI's numbers
    info = load_info(tmp_path / "cli")
    assert result.success_rate.pc_success == info["overall"]["pc_success"]
    assert list(result.success_rate.pc_success_ci95 or ()) == info["overall"]["pc_success_ci95"]
    for task in info["per_task"]:
        rate = result.per_task[task["task"]]
        assert (rate.pc_success, rate.n_success, rate.n_episodes) == (task["pc_success"], task["n_success"], task["n_episodes"])
        assert list(rate.ci95 or ()) == pytest.approx([x / 100 for x in task["pc_success_ci95"]])
    assert result.info["config"]["policy"]["type"] == "object" and result.info["config"]["policy"]["path"] == "step-0"
    assert result.info["scheduling"]["placement"] == "driver"


@pytest.mark.pusht
def test_the_api_gives_the_cli_s_episodes_on_pusht(cli, tmp_path: Path) -> None:
    pytest.importorskip("gym_pusht")
    flags = {"env.obs_type": "state", "env.episode_length": 30}
    res = cli("eval", "--env.type=pusht", *(f"--{k}={v}" for k, v in flags.items()), "--eval.n_episodes=4", "--seed=5",
              "--workers=2", "--policy.type=module", "--policy.path=helpers_policies:toward_block",
              f"--output_dir={tmp_path / 'cli'}")
    assert res.rc == 0, res.err
    with evaluator(tmp_path / "api", env="pusht", workers=2, flags=flags) as ev:
        result = ev.evaluate(toward_block(), n_episodes=4, seed=5)
    cli_episodes = per_episode(tmp_path / "cli")
    # success, steps and seed bit for bit; rewards to 1e-12: gym-pusht's may differ by an ulp between processes
    assert_same_per_episode(api_per_episode(result), cli_episodes)
    assert_same_per_episode(per_episode(result.output_dir), cli_episodes)
    assert len({round(r[1], 9) for r in cli_episodes.values()}) > 1  # the episodes differ: a real comparison


@pytest.mark.lerobot
@pytest.mark.pusht
def test_a_lerobot_policy_in_memory_gives_the_cli_s_episodes_of_its_checkpoint(cli, tmp_path: Path) -> None:
    """A tiny ACT, saved as lerobot-train saves it for the CLI, and in memory for the Evaluator."""
    pytest.importorskip("lerobot")
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from lerobot_helpers import make_checkpoint
    from lerobot_in_memory import InMemoryLeRobot
    from rollbench.config.codec import config_from_flags

    ckpt = make_checkpoint(tmp_path / "ckpt", config_from_flags({"env.type": "pusht", "policy.type": "random"}).env)
    res = cli("eval", "--env.type=pusht", "--env.episode_length=20", "--eval.n_episodes=3", "--workers=2",
              "--eval.mode=lockstep", f"--policy.path={ckpt}", f"--output_dir={tmp_path / 'cli'}")
    assert res.rc == 0, res.err
    policy = ACTPolicy.from_pretrained(ckpt)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(ckpt))
    with evaluator(tmp_path / "api", env="pusht", workers=2, flags={"env.episode_length": 20}) as ev:
        result = ev.evaluate(InMemoryLeRobot(policy, pre, post), n_episodes=3)
    assert result.info["mode"] == "lockstep"
    assert_same_per_episode(api_per_episode(result), per_episode(tmp_path / "cli"))


def test_the_docs_show_the_tested_lerobot_adapter() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "python_api.md").read_text()
    adapter = (Path(__file__).resolve().parent / "lerobot_in_memory.py").read_text().split('"""\n\n', 1)[1]
    assert f"```python\n{adapter}```" in doc


class Trained:
    """A torch policy trained in the test's loop: a linear map from (position, target) to the action."""

    def __init__(self) -> None:
        import torch

        self.net = torch.nn.Linear(4, 2, bias=False)
        torch.nn.init.zeros_(self.net.weight)  # untrained: it stands still

    def act(self, batch: dict[str, Any], slots: Any) -> np.ndarray:
        import torch

        with torch.no_grad():
            state = torch.as_tensor(np.asarray(batch["observation.environment_state"]), dtype=torch.float32)
            return self.net(state).clamp(-1.0, 1.0).numpy()


def train(policy: Trained, steps: int) -> None:
    """Regress the fake benchmark's expert action (straight to the target) on random states."""
    import torch

    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(policy.net.parameters(), lr=0.05)
    for _ in range(steps):
        state = torch.rand(64, 4, generator=gen) * 2 - 1
        expert = ((state[:, 2:4] - state[:, 0:2]) / 0.1).clamp(-1.0, 1.0)
        loss = torch.nn.functional.mse_loss(policy.net(state).clamp(-1.0, 1.0), expert)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_training_loop_evaluates_its_policy_as_it_changes(tmp_path: Path) -> None:
    """The same object evaluated before and after training: the second run acts with the new
    weights (the watch on a policy's weights is per run), and each run's directory is whole."""
    pytest.importorskip("torch")
    policy = Trained()
    results = []
    with evaluator(tmp_path, workers=2) as ev:
        for step in (0, 200):
            train(policy, step - (results[-1][0] if results else 0))  # the loop trains, and evaluates now and then
            results.append((step, ev.evaluate(policy, n_episodes=4, name=f"step-{step}")))
    (_, before), (_, after) = results
    assert before.success_rate.n_success == 0 < after.success_rate.n_success
    assert [r.sum_reward for r in before.episodes] != [r.sum_reward for r in after.episodes]
    for step, result in results:
        assert result.output_dir == tmp_path / f"step-{step}"
        assert result.ok and load_info(result.output_dir)["status"] == "complete"
        assert (result.output_dir / "run.json").is_file()
        logged = [json.loads(line) for f in (result.output_dir / "episodes").glob("*.jsonl") for line in f.read_text().splitlines()]
        assert len(logged) == 12 == len(result.episodes)
        assert per_episode(result.output_dir) == api_per_episode(result)


def test_names_count_up_and_a_name_again_resumes_its_run(tmp_path: Path) -> None:
    with evaluator(tmp_path, workers=1) as ev:
        first = ev.evaluate(steer(), n_episodes=2)
        second = ev.evaluate(steer(), n_episodes=2)
        again = ev.evaluate(steer(), n_episodes=2, name=first.name)
    assert (first.name, second.name) == ("eval-0001", "eval-0002")
    assert again.ran == 0 and api_per_episode(again) == api_per_episode(first)  # finished: read back, nothing run
    with evaluator(tmp_path, workers=1) as ev:  # a new Evaluator on the same directory takes the next free name
        assert ev.evaluate(steer(), n_episodes=1).name == "eval-0003"


def cli_error(cli: Any, *args: str) -> str:
    res = cli("eval", *args)
    assert res.rc == 2, (res.out, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rollbench: error: "), res.err
    return lines[0].removeprefix("rollbench: error: ")


@pytest.mark.parametrize("env, flags, cli_flags", [
    ("fakee", {}, ["--env.type=fakee"]),
    ("fake", {"eval.n_episodes": "many"}, ["--env.type=fake", "--eval.n_episodes=many"]),
    ("fake", {"env.task": "nowhere"}, ["--env.type=fake", "--env.task=nowhere"]),
    ("fake", {"eval.frobnicate": 1}, ["--env.type=fake", "--eval.frobnicate=1"]),
])
def test_bad_flags_are_the_cli_s_one_line_error(cli, tmp_path: Path, env: str, flags: dict[str, Any],
                                                 cli_flags: list[str]) -> None:
    said = cli_error(cli, *cli_flags, "--policy.type=module", "--policy.path=helpers_policies:steer",
                     f"--output_dir={tmp_path / 'cli'}")
    with pytest.raises(ConfigError) as err:
        rollbench.Evaluator(env, tmp_path / "api", flags=flags)
    assert str(err.value) == said
    assert not (tmp_path / "api").exists()


def test_a_keyword_flag_is_its_dotted_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("--eval.n_episodes='many': expected an integer")):
        rollbench.Evaluator("fake", tmp_path, eval__n_episodes="many")
    ev = rollbench.Evaluator("fake", tmp_path, workers=3, eval__batch_size=2, flags={"env.max_steps": 7})
    cfg = ev.config("x")
    assert (cfg.workers, cfg.eval.batch_size, cfg.env.max_steps) == (3, 2, 7)
    cfg = rollbench.Evaluator("fake", tmp_path, task="near", flags={"workers": 2}, eval__seed=None).config("x", 4, 9)
    assert (cfg.env.task, cfg.workers, cfg.eval.n_episodes, cfg.seed) == ("near", 2, 4, 9)


@pytest.mark.parametrize("flags, needle", [
    ({"policy.type": "module"}, "--policy.type=module is not an Evaluator flag"),
    ({"output_dir": "x"}, "--output_dir=x is not an Evaluator flag"),
    ({"env.type": "pusht"}, "--env.type=pusht is not an Evaluator flag: give Evaluator(env=...)"),
    ({"executor": "shards"}, "--executor=shards is not allowed with rollbench.Evaluator"),
    ({"eval.num_shards": 2}, "--eval.num_shards=2 is not allowed"),
    ({"policy.placement": "worker"}, "--policy.placement=worker is not allowed"),
    ({"executor.fresh_env": "true"}, "--executor=local takes no --executor.* flags"),
])
def test_what_a_policy_object_cannot_do_is_refused(tmp_path: Path, flags: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(needle)):
        rollbench.Evaluator("fake", tmp_path, flags=flags)


def test_a_policy_without_act_is_refused_before_any_output(tmp_path: Path) -> None:
    with evaluator(tmp_path / "api") as ev, pytest.raises(ConfigError) as err:
        ev.evaluate(object(), n_episodes=1, name="nothing")
    assert str(err.value) == "Evaluator.evaluate(policy=...): got object, which has no act(batch, slots)"
    assert not (tmp_path / "api" / "nothing").exists()
    with evaluator(tmp_path / "api") as ev, pytest.raises(ConfigError, match="without '/'"):
        ev.evaluate(steer(), name="../elsewhere")


def test_the_cli_refuses_a_policy_object_it_cannot_have(cli, tmp_path: Path) -> None:
    said = cli_error(cli, "--env.type=fake", "--policy.type=object", "--policy.path=step-0", f"--output_dir={tmp_path}")
    assert "handed to rollbench.Evaluator in Python" in said
    assert not (tmp_path / "eval_info.json").exists()


def test_import_rollbench_stays_light() -> None:
    """`import rollbench` loads none of the run's machinery; `rollbench.Evaluator` loads it."""
    code = ("import sys, rollbench; heavy = sorted(m for m in ('numpy', 'rollbench.lifecycle', 'rollbench.evaluator') "
            "if m in sys.modules); print(heavy); rollbench.Evaluator; print('rollbench.evaluator' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]
