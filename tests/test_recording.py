"""`--eval.recording`: the episodes as a LeRobot dataset, written with LeRobot's own writer and
read back with `LeRobotDataset(repo_id, root=DIR)`: as many episodes as kept, as many frames
as steps, the actions the policy sent, success as logged; durable across a kill, the same
for shards, and filtered by `--eval.record`. LeRobot's dataset code: both supported lines
(`make test` runs this module with LeRobot 0.4.4 and with 0.6.x)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import CliResult, load_info, per_episode, run_subprocess

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

FAKE = ("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=4", "--eval.recording=true",
        "--eval.report=false")


def load(out: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """The run's dataset, loaded as a user would (offline), and its non-video columns."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = load_info(out)["dataset"]
    ds = LeRobotDataset(info["repo_id"], root=info["root"])
    columns = {k: np.asarray(ds.hf_dataset[k]) for k in ds.hf_dataset.column_names}
    return ds, columns


def assert_same_dataset(a_dir: Path, b_dir: Path) -> None:
    """Two runs' datasets hold the same columns, value for value."""
    _, a = load(a_dir)
    _, b = load(b_dir)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def random_actions(seed: int, n: int, low: float = -1.0, high: float = 1.0, dim: int = 2) -> np.ndarray:
    """What the random policy sends in an episode of seed `seed` (one generator per episode)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(np.full(dim, low, np.float32), np.full(dim, high, np.float32)).astype(np.float32)
                     for _ in range(n)])


def plan_order(out: Path) -> list[tuple[str, int, int]]:
    """The run's episodes in plan order (eval_info's tasks in order, each in episode order)."""
    return [(t["task_group"], t["task_id"], i) for t in load_info(out)["per_task"] for i in t["metrics"]["episode_ix"]]


def check_against_log(out: Path, columns: dict[str, np.ndarray], kept: set[tuple[int, int]] | None = None) -> None:
    """Episode by episode, in plan order: frames = n_steps, success = the log's, seed and index."""
    episodes = per_episode(out)  # (group, task_id, index) -> (success, sum, max, n_steps, seed)
    want = [k for k in plan_order(out) if kept is None or (k[1], k[2]) in kept]
    ep = columns["episode_index"]
    assert sorted(set(ep.tolist())) == list(range(len(want)))
    for j, key in enumerate(want):
        rows = ep == j
        success, total, _, n_steps, seed = episodes[key]
        assert rows.sum() == n_steps, key
        assert set(columns["episode_seed"][rows].ravel().tolist()) == {seed}
        assert set(columns["episode_index_in_run"][rows].ravel().tolist()) == {key[2]}
        assert bool(columns["next.success"][rows].any()) == success, key
        assert columns["next.done"][rows].ravel().tolist() == [False] * (n_steps - 1) + [True]
        assert np.isclose(columns["next.reward"][rows].sum(), total, atol=1e-3)
        assert columns["frame_index"][rows].tolist() == list(range(n_steps))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CliResult]:
    """A clean recorded run in 2 workers (its folder, its result): checked on its own, and the
    dataset that a killed-and-resumed run and a re-recorded run must reproduce (one run, not three)."""
    out = tmp_path_factory.mktemp("recorded") / "clean"
    res = run_subprocess(*FAKE, "--workers=2", f"--output_dir={out}")
    assert res.rc == 0, res.err
    return out, res


def test_a_recorded_run_loads_as_a_lerobot_dataset(recorded: tuple[Path, CliResult]) -> None:
    out, res = recorded
    # LeRobot's progress bars and warnings stay out of rollbench's output (`--debug` has them)
    for noise in ("Map:", "torchcodec", "RuntimeWarning", "Copy data", "Validate all", "%|"):
        assert noise not in res.err + res.out, (noise, res.err)
    ds, columns = load(out)
    assert ds.meta.total_episodes == 12
    check_against_log(out, columns)
    assert {"observation.state", "observation.environment_state", "action"} <= set(ds.meta.features)
    # the actions are the ones the policy sent: the random policy's generator of each episode
    episodes = per_episode(out)
    for j, key in enumerate(plan_order(out)):
        rows = columns["episode_index"] == j
        _, _, _, n_steps, seed = episodes[key]
        np.testing.assert_array_equal(columns["action"][rows], random_actions(seed, n_steps), err_msg=str(key))
    # episodes done at their first step (every frame done) beside longer ones (done only at the
    # end): LeRobot 0.6 computes the first kind's bool stats without casting them to float, and its
    # aggregate_datasets cannot join the two (ArrowInvalid) unless rollbench evens them out
    lengths = [n_steps for _, _, _, n_steps, _ in episodes.values()]
    assert min(lengths) == 1 and max(lengths) > 1, lengths
    tasks = {ds[int(np.flatnonzero(columns["episode_index"] == j)[0])]["task"] for j in range(12)}
    assert len(tasks) == 3  # each task's description, per frame
    assert load_info(out)["dataset"]["episodes"] == 12
    for path in (out / "episodes").glob("*.jsonl"):  # frames go to the dataset, never to the log
        for line in path.read_text().splitlines():
            assert "frames" not in json.loads(line)


def test_pusht_pixels_in_lockstep_batches_smaller_than_the_run(tmp_path: Path) -> None:
    """lerobot-eval's recording crashed on its second batch (its issues #4552, #4622)."""
    import av

    res = run_subprocess("eval", "--env.type=pusht", "--env.obs_type=pixels_agent_pos", "--policy.type=random",
                         "--eval.n_episodes=3", "--eval.mode=lockstep", "--eval.batch_size=2", "--env.episode_length=15",
                         "--eval.recording=true", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    ds, columns = load(tmp_path)
    assert ds.meta.total_episodes == 3
    check_against_log(tmp_path, columns)
    assert ds.meta.features["observation.image"]["dtype"] == "video"
    assert ds.meta.features["observation.image"]["shape"] == (96, 96, 3)
    episodes = per_episode(tmp_path)
    for j, key in enumerate(plan_order(tmp_path)):
        rows = columns["episode_index"] == j
        _, _, _, n_steps, seed = episodes[key]
        np.testing.assert_array_equal(columns["action"][rows], random_actions(seed, n_steps, 0.0, 512.0))
    videos = sorted(Path(ds.root).glob("videos/observation.image/**/*.mp4"))
    with av.open(str(videos[0])) as container:
        assert sum(1 for _ in container.decode(video=0)) == 3 * 15  # every step's frame, all episodes


@pytest.mark.metaworld
def test_metaworld_expert_in_lockstep_batches(tmp_path: Path) -> None:
    res = run_subprocess("eval", "--env.type=metaworld", "--env.task=reach-v3,push-v3", "--policy.type=expert",
                         "--eval.n_episodes=3", "--eval.mode=lockstep", "--eval.batch_size=2", "--eval.recording=true",
                         "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    ds, columns = load(tmp_path)
    assert ds.meta.total_episodes == 6 and ds.meta.fps == 80
    check_against_log(tmp_path, columns)


def test_a_killed_recorded_run_resumes_to_the_clean_runs_dataset(recorded: tuple[Path, CliResult], tmp_path: Path) -> None:
    from test_resume import start_and_stop

    args = (*FAKE, "--workers=1", "--env.step_sleep_s=0.01")  # slowed, so the kill lands mid-run
    rc, _, logged = start_and_stop(args, tmp_path / "killed", signal.SIGKILL, after_lines=4)
    assert rc == -signal.SIGKILL and 4 <= logged < 12
    res = run_subprocess(*args, f"--output_dir={tmp_path / 'killed'}")
    assert res.rc == 0, res.err
    assert_same_dataset(recorded[0], tmp_path / "killed")


def test_record_failures_keeps_exactly_the_failed_episodes(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--eval.record=failures", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    failed = {(k[1], k[2]) for k, v in per_episode(tmp_path).items() if not v[0]}
    assert 0 < len(failed) < 12
    _, columns = load(tmp_path)
    check_against_log(tmp_path, columns, kept=failed)
    assert load_info(tmp_path)["dataset"]["record"] == "failures"


def test_shards_write_their_parts_and_the_launcher_joins_them(tmp_path: Path) -> None:
    res = run_subprocess(*FAKE, "--eval.num_shards=2", "--executor=shards", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    _, columns = load(tmp_path)
    check_against_log(tmp_path, columns)
    assert part_dirs(tmp_path) == []  # joined by the launcher, then removed


def part_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "dataset_parts").iterdir() if p.is_dir())


def log_lines(out: Path) -> int:
    return sum(len(f.read_text().splitlines()) for f in (out / "episodes").glob("*.jsonl"))


def test_a_finished_run_keeps_its_dataset_and_not_the_parts(tmp_path: Path) -> None:
    """Once a finished run's parts are joined they are removed (the dataset holds their frames,
    videos included: keeping both doubled the disk); the same command again runs nothing and
    keeps the dataset as it is."""
    out = tmp_path / "run"
    res = run_subprocess(*FAKE, f"--output_dir={out}")
    assert res.rc == 0, res.err
    assert part_dirs(out) == [] and (out / "dataset_parts" / "joined.json").is_file()
    before, lines = load(out)[1], log_lines(out)
    again = run_subprocess(*FAKE, f"--output_dir={out}")
    assert again.rc == 0, again.err
    assert log_lines(out) == lines  # no episode ran again
    after = load(out)[1]
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)


def test_a_finished_run_that_keeps_more_episodes_records_them_again(recorded: tuple[Path, CliResult], tmp_path: Path) -> None:
    """A finished run with `--eval.record=failures`, then the same run with `--eval.record=all`:
    the failures' parts were removed, so they run again for their frames (same seeds, same
    episodes), and the dataset is a clean `all` run's, column for column."""
    out = tmp_path / "run"
    first = run_subprocess(*FAKE, "--eval.record=failures", f"--output_dir={out}")
    assert first.rc == 0, first.err
    assert part_dirs(out) == []
    then = run_subprocess(*FAKE, "--eval.record=all", f"--output_dir={out}")
    assert then.rc == 0, then.err
    assert_same_dataset(recorded[0], out)
    assert load_info(out)["dataset"]["record"] == "all"


def test_an_adaptive_recorded_run_keeps_only_the_counted_prefix(tmp_path: Path) -> None:
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=20", "--eval.ci_width=0.45",
                         "--eval.recording=true", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    info = load_info(tmp_path)
    _, columns = load(tmp_path)
    assert info["dataset"]["episodes"] == info["overall"]["n_episodes"] < 60
    check_against_log(tmp_path, columns)


@pytest.mark.parametrize("flag", ["--eval.record=failures", "--eval.recording_repo_id=me/x", "--eval.recording_root=/tmp/x",
                                  "--eval.record_conditions=control"])
def test_recording_flags_without_recording_are_refused(tmp_path: Path, flag: str) -> None:
    res = run_subprocess("eval", "--env.type=fake", "--policy.type=random", flag, f"--output_dir={tmp_path}")
    assert res.rc == 2 and "add --eval.recording=true" in res.err and flag.split("=")[0] in res.err
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("where", ["a file", "a folder with files", "the run directory"])
def test_a_recording_root_that_cannot_take_the_dataset_is_refused_before_any_episode(tmp_path: Path, where: str) -> None:
    """The joined dataset replaces --eval.recording_root at the end of the run: a root that is a
    file, holds someone's files or is the run's own directory stops the run in one line before
    anything runs, and nothing of the user's is touched (an unwritable one: the next test)."""
    out = tmp_path / "run"
    root = {"a file": tmp_path / "f", "a folder with files": tmp_path / "mine", "the run directory": out}[where]
    if where == "a file":
        root.write_text("keep me")
    elif where == "a folder with files":
        root.mkdir()
        (root / "notes.txt").write_text("keep me")
    res = run_subprocess(*FAKE, f"--eval.recording_root={root}", f"--output_dir={out}")
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert res.rc == 2 and len(errors) == 1 and "Traceback" not in res.err, res.err
    assert f"--eval.recording_root={root}" in errors[0]
    assert not (out / "episodes").exists()
    if where == "a file":
        assert root.read_text() == "keep me"
    if where == "a folder with files":
        assert (root / "notes.txt").read_text() == "keep me"


def test_an_unwritable_recording_root_is_refused_before_any_episode(tmp_path: Path) -> None:
    """A root where no directory can be made stops the run in one line that names the flag
    and the folder, before any episode. /proc takes no new entry, even from root (for whom
    os.access says every folder is writable: the check makes and removes a file there)."""
    out = tmp_path / "run"
    res = run_subprocess(*FAKE, "--eval.recording_root=/proc/nope", f"--output_dir={out}")
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert res.rc == 2 and len(errors) == 1 and "Traceback" not in res.err, res.err
    assert "--eval.recording_root='/proc/nope': /proc takes no new file" in errors[0]
    assert not (out / "episodes").exists()


def test_a_recording_root_of_this_run_is_taken_again_on_rerun(tmp_path: Path) -> None:
    """A completed run's own dataset root (non-empty) is accepted when the same command runs again."""
    args = (*FAKE, f"--eval.recording_root={tmp_path / 'ds'}", f"--output_dir={tmp_path / 'run'}")
    assert run_subprocess(*args).rc == 0
    res = run_subprocess(*args)
    assert res.rc == 0, res.err
    assert load_info(tmp_path / "run")["dataset"]["episodes"] == 12


class _Hub:
    """The hub's side of a push, at the network edge: what LeRobot's push_to_hub asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        import huggingface_hub
        from huggingface_hub import repocard

        self.calls: list[tuple[str, dict[str, Any]]] = []

        def record(name: str) -> Any:
            def call(_self: Any, *args: Any, **kwargs: Any) -> None:
                if fail:
                    raise ConnectionError("the hub is not reachable from here")
                self.calls.append((name, {**dict(enumerate(args)), **kwargs}))
            return call

        for name in ("create_repo", "upload_folder", "create_tag", "delete_tag"):
            monkeypatch.setattr(huggingface_hub.HfApi, name, record(name))
        monkeypatch.setattr(repocard.RepoCard, "push_to_hub", record("card"))


def test_a_repo_id_pushes_the_dataset_as_lerobot_eval_does(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = _Hub(monkeypatch)
    res = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=2", "--eval.recording=true",
              "--eval.recording_repo_id=me/rollouts", "--eval.recording_private=true", "--eval.report=false",
              f"--output_dir={tmp_path}")
    assert res.rc == 0, res.err
    calls = dict(hub.calls)
    assert calls["create_repo"]["repo_id"] == "me/rollouts" and calls["create_repo"]["private"] is True
    assert Path(calls["upload_folder"]["folder_path"]) == tmp_path / "dataset"
    assert load_info(tmp_path)["dataset"]["repo_id"] == "me/rollouts"


def test_a_failed_push_keeps_the_dataset_and_says_how_to_push_it(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _Hub(monkeypatch, fail=True)
    res = cli("eval", "--env.type=fake", "--policy.type=random", "--eval.n_episodes=2", "--eval.recording=true",
              "--eval.recording_repo_id=me/rollouts", "--eval.report=false", f"--output_dir={tmp_path}")
    assert res.rc == 1
    assert "the push to the hub failed (ConnectionError: the hub is not reachable from here)" in res.err
    assert f"hf upload --repo-type=dataset me/rollouts {tmp_path / 'dataset'}" in res.err
    ds, _ = load(tmp_path)
    assert ds.meta.total_episodes == 6
