"""Sharding: any split of the plan, run by hand or by the launcher, merges to the
single-process result, unit for unit; merges count every unit once and say what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import load_info, per_episode, run_subprocess
from rollbench.plan import make_plan, shard

# lockstep in this process (no env workers), so the many small runs here stay fast; shards
# with env workers: test_launcher.py, test_soak.py
FAKE = ("eval", "--env.type=fake", "--policy.type=expert", "--eval.n_episodes=5", "--eval.mode=lockstep",
        "--eval.isolation=none")


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single")
    res = run_subprocess(*FAKE, f"--output_dir={out}")
    assert res.rc == 0, res.err
    return out


def run_shards(cli, out: Path, n: int, ids: range | list[int], *extra: str) -> None:
    for k in ids:
        res = cli(*FAKE, *extra, f"--output_dir={out}", f"--eval.num_shards={n}", f"--eval.shard_id={k}")
        assert res.rc == 0, res.err


@pytest.mark.parametrize("n", [1, 3, 7])
def test_hand_shards_merge_to_the_single_run(cli, tmp_path: Path, single: Path, n: int) -> None:
    run_shards(cli, tmp_path, n, range(n))
    res = cli("merge", str(tmp_path))
    assert res.rc == 0, res.err
    assert "complete" in res.out
    info = load_info(tmp_path)
    assert info["status"] == "complete"
    assert info["overall"]["n_episodes"] == 15
    assert info["duplicates_ignored"] == 0
    assert per_episode(tmp_path) == per_episode(single)
    assert len(list((tmp_path / "episodes").glob("*.jsonl"))) == n


def test_every_way_of_running_writes_the_same_keys_and_the_command_that_reruns_it(
    cli, tmp_path: Path, single: Path
) -> None:
    """One process, --executor=shards, and hand shards merged: the same top-level keys of
    eval_info.json (Ray's: tests/test_ray.py), each with the command that reruns the run; a
    merge's is its shards' run as one process, and running it gives the same episodes."""
    res = run_subprocess(*FAKE, f"--output_dir={tmp_path / 'local'}", "--eval.num_shards=2", "--executor=shards")
    assert res.rc == 0, res.err
    run_shards(cli, tmp_path / "hand", 2, range(2))
    assert cli("merge", str(tmp_path / "hand")).rc == 0
    infos = {name: load_info(path) for name, path in
             (("one", single), ("local", tmp_path / "local"), ("merge", tmp_path / "hand"))}
    keys = {name: list(info) for name, info in infos.items()}
    assert keys["one"] == keys["local"] == keys["merge"], keys
    assert {info["schema_version"] for info in infos.values()} == {4}
    # the executor the user named, in eval_info.json as named (schema 4: it was "launch-local")
    assert [infos[n]["executor"]["name"] for n in infos] == ["local", "shards", "merge"]
    # one shape (schema 3): mode is how the units were scheduled, scheduling the Schedule's keys
    assert [infos[n]["mode"] for n in infos] == ["lockstep", "lockstep", None]
    assert set(infos["one"]["scheduling"]) == set(infos["local"]["scheduling"]) and infos["merge"]["scheduling"] is None
    assert [s["scheduling"]["mode"] for s in infos["local"]["executor"]["shards"]] == ["lockstep", "lockstep"]
    assert infos["merge"]["executor"] == {"name": "merge", "merged_from": 1} and infos["one"]["executor"] == {"name": "local"}
    assert infos["one"]["policy_calls"]["calls"] > 0 and infos["merge"]["policy_calls"] is None
    command = infos["merge"]["command"]
    assert command[:2] == ["rollbench", "eval"] and f"--output_dir={tmp_path / 'hand'}" in command
    assert not any(f.startswith(("--eval.shard_id", "--eval.num_shards")) for f in command), command
    assert "--eval.n_episodes=5" in command and len(command) < 12, command  # what differs from the defaults
    rerun = [f for f in command[1:] if not f.startswith("--output_dir=")]
    res = run_subprocess(*rerun, f"--output_dir={tmp_path / 'rerun'}")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "rerun") == per_episode(tmp_path / "hand") == per_episode(single)


def test_a_shard_with_no_units_is_fine(cli, tmp_path: Path) -> None:
    # 2 episodes of one task over 3 shards: shard 2 gets nothing to do
    flags = ("--env.task=near", "--eval.n_episodes=2")
    for k in range(3):
        res = cli("eval", "--env.type=fake", "--policy.type=expert", "--eval.mode=lockstep", *flags,
                  f"--output_dir={tmp_path}", "--eval.num_shards=3", f"--eval.shard_id={k}")
        assert res.rc == 0, res.err
    assert cli("merge", str(tmp_path)).rc == 0
    assert sorted(per_episode(tmp_path)) == [("near", 0, 0), ("near", 0, 1)]


def test_shards_executor_three_shards_matches_the_single_run(tmp_path: Path, single: Path) -> None:
    res = run_subprocess(*FAKE, f"--output_dir={tmp_path}", "--eval.num_shards=3", "--executor=shards")
    assert res.rc == 0, res.err
    assert "overall" in res.out and "complete" in res.out
    assert per_episode(tmp_path) == per_episode(single)
    assert sorted(p.name for p in (tmp_path / "logs").glob("shard-*.log")) == [f"shard-{k}.log" for k in range(3)]
    assert [s["returncode"] for s in load_info(tmp_path)["executor"]["shards"]] == [0, 0, 0]


@given(n_tasks=st.integers(1, 5), n_episodes=st.integers(1, 40), n_shards=st.integers(1, 9))
def test_shards_partition_the_plan(n_tasks: int, n_episodes: int, n_shards: int) -> None:
    tasks = {"suite": [f"t{i}" for i in range(n_tasks)]}
    full = make_plan(tasks, n_episodes, seed=7)
    parts = [shard(full, k, n_shards) for k in range(n_shards)]
    assert sorted(u for p in parts for u in p) == sorted(full)
    assert len({u.key for p in parts for u in p}) == len(full)  # disjoint
    lo, hi = n_episodes // n_shards, -(-n_episodes // n_shards)
    for p in parts:
        for t in range(n_tasks):
            assert lo <= sum(u.task_id == t for u in p) <= hi
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    # a unit's seed never depends on the split
    assert all(u.seed == 7 + u.episode_index for p in parts for u in p)


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        (("--eval.num_shards=0",), "--eval.num_shards=0 is not allowed"),
        (("--eval.num_shards=3", "--eval.shard_id=3"), "--eval.shard_id=3 is not allowed"),
        (("--eval.num_shards=3", "--eval.shard_id=-1"), "--eval.shard_id=-1 is not allowed"),
    ],
)
def test_bad_shard_flags_are_one_line_errors(cli, tmp_path: Path, flags: tuple[str, ...], expect: str) -> None:
    res = cli(*FAKE, *flags, f"--output_dir={tmp_path}")
    assert res.rc == 2
    assert res.err.startswith("rollbench: error: ") and expect in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not (tmp_path / "episodes").exists()


def test_merge_of_missing_shards_is_partial(cli, tmp_path: Path) -> None:
    run_shards(cli, tmp_path, 3, [0, 1])
    res = cli("merge", str(tmp_path))
    assert res.rc == 1
    assert "partial" in res.out
    info = load_info(tmp_path)
    assert info["status"] == "partial"
    plan = make_plan({"all": ["near", "mid", "far"]}, 5, 1000)
    expected = [(u.task_group, u.task_id, u.episode_index) for u in shard(plan, 2, 3)]
    missing = [(m["task_group"], m["task_id"], m["episode_index"]) for m in info["missing_units"]]
    assert missing == expected
    assert f"partial: {len(expected)} units missing" in res.err
    assert "all/near#2" in res.err  # shard 2 holds near's episode 2
    assert info["overall"]["n_episodes"] == 15 - len(expected)


def _lines(out: Path) -> list[str]:
    (log,) = (out / "episodes").glob("*.jsonl")
    return log.read_text().splitlines()


def test_a_unit_logged_twice_counts_once(cli, tmp_path: Path, single: Path) -> None:
    res = cli(*FAKE, f"--output_dir={tmp_path}")
    assert res.rc == 0
    lines = _lines(tmp_path)
    (tmp_path / "episodes" / "copy-of-a-rerun.jsonl").write_text("\n".join(lines) + "\n")
    assert cli("merge", str(tmp_path)).rc == 0
    info = load_info(tmp_path)
    assert info["duplicates_ignored"] == 15
    assert info["overall"]["n_episodes"] == 15
    assert all(t["summary"]["n_episodes"] == 5 for t in info["per_task"])
    assert info["conflicts"] == []
    assert per_episode(tmp_path) == per_episode(single)


def test_conflicting_duplicates_are_reported(cli, tmp_path: Path) -> None:
    assert cli(*FAKE, f"--output_dir={tmp_path}").rc == 0
    rec = json.loads(_lines(tmp_path)[0])
    other = {**rec, "success": not rec["success"], "sum_reward": rec["sum_reward"] - 1.0,
             "finished_at": rec["finished_at"] + 1.0}
    (tmp_path / "episodes" / "other-host.jsonl").write_text(json.dumps(other) + "\n")
    assert cli("merge", str(tmp_path)).rc == 0
    info = load_info(tmp_path)
    (conflict,) = info["conflicts"]
    key = (rec["task_group"], rec["task_id"], rec["episode_index"])
    assert (conflict["task_group"], conflict["task_id"], conflict["episode_index"]) == key
    assert conflict["other"]["writer"] == "other-host"
    assert conflict["kept"]["outcome"][1] == rec["success"]  # the first written is kept
    assert conflict["other"]["outcome"][1] == other["success"]
    assert info["overall"]["n_episodes"] == 15
