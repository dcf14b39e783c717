"""`--policy.path=ORG/NAME`: a checkpoint on the hub, resolved once by the driver through
huggingface_hub's real download code, offline against a cache built here by hand
(`$HF_HUB_CACHE/models--ORG--NAME/{refs/<branch>, snapshots/<commit>/...}`, the layout
huggingface_hub writes), and against a loopback server that answers as the hub does when a
repository is missing or gated."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

from conftest import load_info, per_episode, run_subprocess
from lerobot_helpers import make_checkpoint

pytestmark = [pytest.mark.lerobot, pytest.mark.pusht]

REPO_ID = "rollbench-test/act_pusht"
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
SEED = 100000


@pytest.fixture(scope="module")
def act_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rollbench.benchmarks.pusht import PushTConfig

    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "act", PushTConfig(obs_type="environment_state_agent_pos"))


def put_in_cache(cache: Path, repo_id: str, commit: str, files: Path, branch: str | None = "main") -> Path:
    """What `hf download` leaves behind: the snapshot of `commit` and `refs/<branch>` naming it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(files, snapshot)
    if branch is not None:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / branch).write_text(commit)
    return snapshot


def offline(cache: Path) -> dict[str, str]:
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}


def eval_args(path: str, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "--env.type=pusht", "--env.obs_type=environment_state_agent_pos", "--env.episode_length=12",
        f"--policy.path={path}", "--eval.n_episodes=3", f"--seed={SEED}", f"--output_dir={out}",
        "--eval.max_episodes_rendered=0", "--eval.report=false", *extra,
    ]


def one_line_error(res) -> str:
    assert res.rc == 2, (res.rc, res.err[-2000:])
    lines = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert len(lines) == 1 and "Traceback" not in res.err, res.err  # (gym-pusht's pygame warns on import)
    return lines[0]


def test_a_hub_id_runs_from_the_cache_and_equals_its_directory(act_ckpt: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    put_in_cache(cache, REPO_ID, COMMIT_A, act_ckpt)
    res = run_subprocess(*eval_args(REPO_ID, tmp_path / "hub_run"), **offline(cache))
    assert res.rc == 0, res.err[-3000:]
    local = run_subprocess(*eval_args(str(act_ckpt), tmp_path / "dir_run"), **offline(cache))
    assert local.rc == 0, local.err[-3000:]
    assert per_episode(tmp_path / "hub_run") == per_episode(tmp_path / "dir_run")
    assert len(per_episode(tmp_path / "hub_run")) == 3
    # the commit is recorded where a reader of the results looks, beside the id as given
    info = load_info(tmp_path / "hub_run")
    assert info["config"]["policy"]["path"] == REPO_ID
    assert info["config"]["policy"]["commit"] == COMMIT_A
    manifest = json.loads((tmp_path / "hub_run" / "run.json").read_text())
    assert manifest["identity"]["policy"]["commit"] == COMMIT_A
    assert "revision" not in manifest["identity"]["policy"]  # the commit decides, not the branch name
    assert info["startup"]["checkpoint_resolved"] <= info["startup"]["first_env_step"]


def test_a_moved_branch_does_not_mix_checkpoints_in_one_run(act_ckpt: Path, tmp_path: Path) -> None:
    cache, out = tmp_path / "hub", tmp_path / "run"
    put_in_cache(cache, REPO_ID, COMMIT_A, act_ckpt)
    first = run_subprocess(*eval_args(REPO_ID, out), **offline(cache))
    assert first.rc == 0, first.err[-3000:]
    put_in_cache(cache, REPO_ID, COMMIT_B, act_ckpt)  # main moves on
    moved = run_subprocess(*eval_args(REPO_ID, out), **offline(cache))
    assert moved.rc == 2
    line = one_line_error(moved)
    assert COMMIT_A in line and COMMIT_B in line and f"--policy.revision={COMMIT_A}" in line
    # the commit the run began with resumes it (nothing is left to run)
    pinned = run_subprocess(*eval_args(REPO_ID, out, f"--policy.revision={COMMIT_A}"), **offline(cache))
    assert pinned.rc == 0, pinned.err[-3000:]
    assert "0 episodes run" in pinned.out
    # a tag resolves to its commit: v1 -> B is the moved branch's run, in a directory of its own
    (cache / "models--rollbench-test--act_pusht" / "refs" / "v1").write_text(COMMIT_B)
    tagged = run_subprocess(*eval_args(REPO_ID, tmp_path / "tagged", "--policy.revision=v1"), **offline(cache))
    assert tagged.rc == 0, tagged.err[-3000:]
    info = load_info(tmp_path / "tagged")
    assert (info["config"]["policy"]["revision"], info["config"]["policy"]["commit"]) == ("v1", COMMIT_B)


def test_shard_processes_find_the_driver_s_commit(act_ckpt: Path, tmp_path: Path) -> None:
    cache, out = tmp_path / "hub", tmp_path / "run"
    put_in_cache(cache, REPO_ID, COMMIT_A, act_ckpt)
    res = run_subprocess(*eval_args(REPO_ID, out, "--eval.num_shards=2", "--executor=shards"), **offline(cache))
    assert res.rc == 0, res.err[-3000:]
    assert len(per_episode(out)) == 3
    # each child was handed the commit, so it looked nothing up (its argv is the first line of its log)
    logs = sorted((out / "logs").glob("shard-*.log"))
    assert len(logs) == 2
    for path in logs:
        assert f"--policy.commit={COMMIT_A}" in path.read_text().splitlines()[0]


def test_check_takes_a_hub_id(act_ckpt: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    snapshot = put_in_cache(cache, REPO_ID, COMMIT_A, act_ckpt)
    res = run_subprocess(
        "check", "--env.type=pusht", "--env.obs_type=environment_state_agent_pos", f"--policy.path={REPO_ID}",
        **offline(cache),
    )
    assert res.rc == 0, res.err[-3000:]
    assert f"checkpoint {snapshot}" in res.out


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("not_cached", ["HF_HUB_OFFLINE", "rollbench-test/missing@main", "not in the cache"]),
        ("no_such_revision", ["HF_HUB_OFFLINE", f"{REPO_ID}@v9", "not in the cache"]),
        ("missing_files", ["has no model.safetensors", REPO_ID]),
        ("revision_with_directory", ["--policy.revision", "local path"]),
    ],
)
def test_bad_hub_ids_are_one_line_exit_2(act_ckpt: Path, tmp_path: Path, case: str, words: list[str]) -> None:
    cache, out = tmp_path / "hub", tmp_path / "run"
    snapshot = put_in_cache(cache, REPO_ID, COMMIT_A, act_ckpt)
    path, extra = REPO_ID, []
    if case == "not_cached":
        path = "rollbench-test/missing"
    elif case == "no_such_revision":
        extra = ["--policy.revision=v9"]
    elif case == "missing_files":
        (snapshot / "model.safetensors").unlink()
    else:
        path, extra = str(act_ckpt), ["--policy.revision=main"]
    line = one_line_error(run_subprocess(*eval_args(path, out, *extra), **offline(cache)))
    for word in words:
        assert word in line, line
    assert not (out / "run.json").exists()  # refused before anything was written


class FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers every request as the hub answers for a repository that is missing or gated
    (the status and the `X-Error-Code` header huggingface_hub reads)."""

    def do_GET(self) -> None:
        gated = "/gated" in self.path
        self.send_response(403 if gated else 404)
        self.send_header("X-Error-Code", "GatedRepo" if gated else "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        body = json.dumps({"error": "gated" if gated else "Repository not found"}).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    ("repo", "words"),
    [("org/gated-policy", ["gated", "HF_TOKEN"]), ("org/nothing-here", ["not a local path, nor a repository on the hub", "HF_TOKEN"])],
)
def test_hub_refusals_are_one_line_exit_2(fake_hub: str, tmp_path: Path, repo: str, words: list[str]) -> None:
    res = run_subprocess(*eval_args(repo, tmp_path / "run"), HF_ENDPOINT=fake_hub, HF_HUB_CACHE=str(tmp_path / "hub"),
                         HF_HUB_OFFLINE="0", HF_HUB_ETAG_TIMEOUT="5", timeout=120)
    line = one_line_error(res)
    for word in words:
        assert word in line, line
