"""Policies over the network: `--policy.type=remote` against `rollbench serve`, through the real CLI.

The server runs in a thread of the test process (helpers_remote.rollbench_server); the
env workers of each run are separate processes that connect to it, as in production.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, load_info, per_episode, subprocess_env
from helpers_remote import free_port, rollbench_server, serve_process, silent_server_thread
from rollbench.errors import ConfigError
from rollbench.remote.keys import KeyMap, parse_keys
from rollbench.remote.wire import ProtocolError, packb, unpackb

pytest.importorskip("websockets")

FAKE = ["--env.type=fake"]


def _eval(cli, out: Path, *flags: str):
    n = [] if any(f.startswith("--eval.n_episodes") for f in flags) else ["--eval.n_episodes=4"]
    return cli("eval", *FAKE, *n, f"--output_dir={out}", "--resume=false", *flags)


# -- the wire ---------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["openpi", "vla-eval"])
def test_arrays_round_trip_and_peers_decode_them(dialect: str) -> None:
    from openpi_client import msgpack_numpy
    from vla_eval.protocol.numpy_codec import decode_ndarray

    msg = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], dtype=np.uint8), "s": "x", "n": np.float64(2.5)}
    data = packb(msg, dialect)  # type: ignore[arg-type]
    back = unpackb(data)
    assert back["a"].dtype == np.float32 and np.array_equal(back["a"], msg["a"]) and back["s"] == "x" and back["n"] == 2.5
    import msgpack

    peer = msgpack_numpy.unpackb(data) if dialect == "openpi" else msgpack.unpackb(data, object_hook=decode_ndarray, raw=False)
    assert np.array_equal(peer["a"], msg["a"]) and np.array_equal(peer["b"], msg["b"])
    # and rollbench reads what the peers write
    theirs = msgpack_numpy.packb({"x": np.ones((2, 2), np.float64)})
    assert np.array_equal(unpackb(theirs)["x"], np.ones((2, 2)))


def test_the_decoder_refuses_what_is_not_a_numeric_array() -> None:
    with pytest.raises(ProtocolError, match="not a msgpack frame"):
        unpackb(b"\xc1")
    with pytest.raises(ProtocolError, match="text frame"):
        unpackb("hello")
    bad = packb({"x": {"__ndarray__": True, "data": b"\0" * 8, "dtype": "|O", "shape": [1]}}, "vla-eval")
    with pytest.raises(ProtocolError, match="only bool, integer and float"):
        unpackb(bad)
    short = packb({"x": {"__ndarray__": True, "data": b"\0" * 7, "dtype": "<f8", "shape": [1]}}, "vla-eval")
    with pytest.raises(ProtocolError, match="needs 8 bytes, got 7"):
        unpackb(short)


def test_key_mapping_defaults_and_overrides(tmp_path: Path) -> None:
    libero = KeyMap("openpi", "libero")
    row = {"observation.images.image": 1, "observation.images.image2": 2, "observation.state": 3}
    assert libero.to_wire(row) == {"observation/image": 1, "observation/wrist_image": 2, "observation/state": 3}
    vla = KeyMap("vla-eval", "metaworld")
    wire = vla.to_wire({"observation.image": np.zeros(1), "observation.state": np.ones(1)})
    assert set(wire) == {"images", "state"} and set(wire["images"]) == {"image"}
    assert set(vla.from_wire(wire)) == {"observation.images.image", "observation.state"}
    metaworld = KeyMap("vla-eval", "metaworld", known=frozenset({"observation.image", "observation.state"}))
    assert set(metaworld.from_wire(wire)) == {"observation.image", "observation.state"}
    assert set(KeyMap("openpi").from_wire({"observation/environment_state": np.zeros(1)})) == {"observation.environment_state"}
    explicit = parse_keys("--policy.keys", "observation.state=qpos")
    assert KeyMap("openpi", "", explicit).to_wire({"observation.state": 1, "observation.other": 2}) == {"qpos": 1}
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"observation.state": "s"}))
    assert parse_keys("--serve.keys", f"@{path}") == {"observation.state": "s"}
    with pytest.raises(ConfigError, match=r"^--policy.keys=nokey: 'nokey' is not ROLLBENCH_KEY=WIRE_KEY"):
        parse_keys("--policy.keys", "nokey")


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--policy.protocol=grpc", "--policy.protocol='grpc'"),
        ("--policy.replan_steps=0", "--policy.replan_steps=0 is not allowed; it must be >= 1"),
        ("--policy.timeout_s=-1", "--policy.timeout_s=-1.0 is not allowed; it must be > 0"),
        ("--policy.replan_step=2", "Did you mean --policy.replan_steps? Known: --policy.url"),
    ],
)
def test_bad_client_flags_are_one_line_config_errors(cli, tmp_path: Path, flag: str, message: str) -> None:
    res = _eval(cli, tmp_path / "o", "--policy.type=remote", "--policy.url=ws://127.0.0.1:9", flag)
    assert res.rc == 2, res.err
    line = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert len(line) == 1 and message in line[0], res.err
    assert not (tmp_path / "o").exists()


def test_no_server_is_a_config_error_before_any_output(cli, tmp_path: Path) -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    res = _eval(cli, tmp_path / "o", "--policy.type=remote", f"--policy.url={url}", "--policy.connect_retries=1")
    assert res.rc == 2
    assert f"--policy.url={url}: cannot connect after 2 attempts" in res.err
    assert not (tmp_path / "o").exists()


# -- results through the server == in-process ---------------------------------------------


@pytest.mark.parametrize("policy", ["expert", "random"])
def test_fake_benchmark_results_are_identical_through_both_dialects(cli, tmp_path: Path, policy: str) -> None:
    ref = _eval(cli, tmp_path / "ref", f"--policy.type={policy}", "--workers=2")
    assert ref.rc == 0, ref.err
    variants = {
        "auto": ["--workers=2", "--slots_per_worker=3"],
        "openpi": ["--workers=2", "--slots_per_worker=3"],
        "vla-eval": ["--workers=2", "--slots_per_worker=3"],
        "openpi-driver": ["--policy.placement=driver", "--workers=2", "--slots_per_worker=2"],
        "vla-eval-lockstep": ["--eval.mode=lockstep", "--eval.batch_size=3"],
    }
    with rollbench_server(policy__type=policy, env__type="fake") as server:
        for name, flags in variants.items():
            protocol = name.split("-driver")[0].split("-lockstep")[0]
            res = _eval(cli, tmp_path / name, "--policy.type=remote", f"--policy.url={server.url}",
                        f"--policy.protocol={protocol}", "--policy.replan_steps=1", *flags)
            assert res.rc == 0, res.err
            assert per_episode(tmp_path / name) == per_episode(tmp_path / "ref"), name
    assert load_info(tmp_path / "openpi-driver")["scheduling"]["placement"] == "driver"
    assert load_info(tmp_path / "auto")["scheduling"]["placement"] == "worker"
    assert load_info(tmp_path / "vla-eval-lockstep")["mode"] == "lockstep"


def test_two_workers_of_four_slots_batch_at_least_four_rows_per_call(cli, tmp_path: Path) -> None:
    """Every worker pipelines its slots' requests; the server batches across workers."""
    flags = ["--env.max_steps=40", "--eval.n_episodes=8", "--workers=2", "--slots_per_worker=4"]
    ref = _eval(cli, tmp_path / "ref", "--policy.type=random", *flags)
    assert ref.rc == 0, ref.err
    with rollbench_server(policy__type="random", env__type="fake", serve__max_wait_ms="5") as server:
        res = _eval(cli, tmp_path / "remote", "--policy.type=remote", f"--policy.url={server.url}", "--policy.replan_steps=1", *flags)
        stats = server.server.stats.snapshot()
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "remote") == per_episode(tmp_path / "ref")
    assert stats["rows"] == sum(v[3] for v in per_episode(tmp_path / "ref").values())  # one row per env step
    print("server counters:", stats)
    assert stats["mean_rows_per_call"] >= 4, stats
    assert stats["errors"] == 0


def test_the_client_executes_replan_steps_of_each_chunk(cli, tmp_path: Path) -> None:
    """Against openpi's own server: a reply's chunk serves `replan_steps` env steps of its slot."""
    from helpers_remote import OpenpiExpert, openpi_server_thread

    ref = _eval(cli, tmp_path / "ref", "--policy.type=expert")
    assert ref.rc == 0, ref.err
    peer = OpenpiExpert(horizon=1)
    port = openpi_server_thread(peer)
    res = _eval(cli, tmp_path / "one", "--policy.type=remote", f"--policy.url=ws://127.0.0.1:{port}", "--policy.replan_steps=1")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "one") == per_episode(tmp_path / "ref")
    steps = [v[3] for v in per_episode(tmp_path / "ref").values()]
    assert peer.calls == sum(steps)
    assert set(peer.prompts) == {"reach a near target", "reach a mid target", "reach a far target"}
    chunky = OpenpiExpert(horizon=5)
    port = openpi_server_thread(chunky)
    res = _eval(cli, tmp_path / "chunk", "--policy.type=remote", f"--policy.url=ws://127.0.0.1:{port}", "--policy.replan_steps=3")
    assert res.rc == 0, res.err
    got = per_episode(tmp_path / "chunk")
    assert chunky.calls == sum(-(-v[3] // 3) for v in got.values())  # ceil(n_steps / 3) requests per episode


def test_rollbench_client_against_vla_eval_model_server(cli, tmp_path: Path) -> None:
    from helpers_remote import vla_eval_server_thread

    ref = _eval(cli, tmp_path / "ref", "--policy.type=expert")
    assert ref.rc == 0, ref.err
    port = vla_eval_server_thread()
    res = _eval(cli, tmp_path / "v", "--policy.type=remote", f"--policy.url=ws://127.0.0.1:{port}", "--policy.protocol=auto",
                "--workers=1", "--slots_per_worker=2")
    assert res.rc == 0, res.err
    assert per_episode(tmp_path / "v") == per_episode(tmp_path / "ref")


@pytest.mark.metaworld
@pytest.mark.slow
def test_metaworld_mt10_expert_is_identical_through_the_server(cli, tmp_path: Path) -> None:
    pytest.importorskip("metaworld")
    mt = ["--env.type=metaworld", "--env.task=mt10", "--eval.n_episodes=1", "--workers=2"]
    ref = cli("eval", *mt, "--policy.type=expert", f"--output_dir={tmp_path / 'ref'}")
    assert ref.rc == 0, ref.err
    with rollbench_server(policy__type="expert", env__type="metaworld", env__task="mt10") as server:
        for protocol in ("openpi", "vla-eval"):
            res = cli("eval", *mt, "--policy.type=remote", f"--policy.url={server.url}", f"--policy.protocol={protocol}",
                      "--policy.replan_steps=1", f"--output_dir={tmp_path / protocol}")
            assert res.rc == 0, res.err
            assert per_episode(tmp_path / protocol) == per_episode(tmp_path / "ref"), protocol


# -- faults -------------------------------------------------------------------------------


def test_a_silent_server_fails_the_run_after_the_timeout(cli, tmp_path: Path) -> None:
    port = silent_server_thread()
    started = time.monotonic()
    res = _eval(cli, tmp_path / "o", "--policy.type=remote", f"--policy.url=ws://127.0.0.1:{port}", "--policy.timeout_s=1",
                "--workers=1")
    assert res.rc == 1
    assert "sent no reply within 1 s (--policy.timeout_s)" in res.err
    assert time.monotonic() - started < 30


def _run(out: Path, url: str, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rollbench", "eval", *FAKE, "--eval.n_episodes=10", "--env.step_sleep_s=0.01",
         "--eval.max_episodes_rendered=0", "--policy.type=remote", f"--policy.url={url}", "--policy.replan_steps=1",
         "--policy.timeout_s=5", "--workers=2", f"--output_dir={out}", *flags,
         *([] if any(f.startswith("--policy.connect_retries") for f in flags) else ["--policy.connect_retries=0"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO,
    )


def _logged(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in out.glob("episodes/*.jsonl"))


def _kill_when_logged(out: Path, server: subprocess.Popen[Any], run: subprocess.Popen[str], n: int = 6) -> None:
    deadline = time.monotonic() + 60
    while _logged(out) < n and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    if not n <= _logged(out) < 30:
        run.kill()
        pytest.fail(f"the run ended before the server could be killed: {run.communicate()[1][-2000:]}")
    server.send_signal(signal.SIGKILL)
    server.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("protocol", "placement"), [("openpi", "worker"), ("vla-eval", "worker"), ("openpi", "driver"), ("openpi", "lockstep")],
)
def test_a_server_restarted_mid_run_costs_only_a_rerun_of_the_episodes_in_flight(
    cli, tmp_path: Path, protocol: str, placement: str,
) -> None:
    """The episodes in flight lost their server-side state: they run again from their start
    on a new connection (one retry each), the rest goes on; the results equal a clean run."""
    ref = _eval(cli, tmp_path / "ref", "--policy.type=random", "--eval.n_episodes=10", "--env.step_sleep_s=0.01", "--workers=2")
    assert ref.rc == 0, ref.err
    port = free_port()
    flags = ["--policy.type=random", "--env.type=fake", "--serve.max_wait_ms=1"]
    server = serve_process(port, *flags)
    out = tmp_path / "o"
    # backoff 0.5 + 1 + 2 + 4 + 8 s: time for a fresh server to start here
    # 2 slots per worker: episodes still to start when the server goes (all 30 fit in the default 16 x 2)
    where = (["--eval.mode=lockstep", "--eval.batch_size=3"] if placement == "lockstep"
             else [f"--policy.placement={placement}", "--slots_per_worker=2"])
    run = _run(out, f"ws://127.0.0.1:{port}", "--policy.connect_retries=5", f"--policy.protocol={protocol}", *where)
    try:
        _kill_when_logged(out, server, run)
        server = serve_process(port, *flags)
        _, err = run.communicate(timeout=120)
    finally:
        server.kill()
        run.kill()
    assert run.returncode == 0, err
    assert per_episode(out) == per_episode(tmp_path / "ref")
    lines = [json.loads(ln) for p in out.glob("episodes/*.jsonl") for ln in p.read_text().splitlines()]
    assert len(lines) == 30 and all(r["status"] == "ok" for r in lines)  # each episode logged once
    assert any(r["attempt"] >= 1 for r in lines)  # the ones in flight ran again


@pytest.mark.slow
def test_a_server_that_does_not_come_back_stops_the_run_and_the_rerun_resumes_exactly(cli, tmp_path: Path) -> None:
    ref = _eval(cli, tmp_path / "ref", "--policy.type=random", "--eval.n_episodes=10", "--env.step_sleep_s=0.01", "--workers=2")
    assert ref.rc == 0, ref.err
    port = free_port()
    flags = ["--policy.type=random", "--env.type=fake", "--serve.max_wait_ms=1"]
    server = serve_process(port, *flags)
    url = f"ws://127.0.0.1:{port}"
    run = _run(tmp_path / "o", url)
    try:
        _kill_when_logged(tmp_path / "o", server, run)
        _, err = run.communicate(timeout=60)
    finally:
        server.kill()
        run.kill()
    assert run.returncode == 1, err
    errors = [ln for ln in err.splitlines() if ln.startswith("rollbench: error:")]
    assert len(errors) == 1 and url in errors[0] and "cannot connect" in errors[0], err
    assert "rerunning the same command resumes" in errors[0]
    server = serve_process(port, *flags)
    try:
        again = _run(tmp_path / "o", url)
        _, err = again.communicate(timeout=120)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
    assert again.returncode == 0, err
    assert per_episode(tmp_path / "o") == per_episode(tmp_path / "ref")


# -- the server ---------------------------------------------------------------------------


def test_serve_flags_are_checked_in_one_line() -> None:
    from rollbench.serve import build_server, serve_help

    with pytest.raises(ConfigError, match=r"^rollbench serve needs --env\.type"):
        build_server({"policy.type": "expert"})
    with pytest.raises(ConfigError, match=r"^--serve.max_batch_size=0 is not allowed; it must be >= 1$"):
        build_server({"policy.type": "expert", "env.type": "fake", "serve.max_batch_size": "0"})
    with pytest.raises(ConfigError, match=r"^unknown flag --serve\.max_batch"):
        build_server({"policy.type": "expert", "env.type": "fake", "serve.max_batch": "2"})
    with pytest.raises(ConfigError, match="cannot be served"):
        build_server({"policy.type": "remote", "env.type": "fake"})
    text = serve_help()
    assert "--serve.max_wait_ms" in text and "__ndarray__" in text and "episode_start" in text


def test_healthz_stats_and_the_api_key(tmp_path: Path) -> None:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy
    from websockets.exceptions import InvalidStatus

    with rollbench_server(policy__type="expert", env__type="fake", env__task="near", api_key="sesame") as server:
        port = server.server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as r:
            assert r.status == 200
        with pytest.raises(InvalidStatus, match="401"):
            WebsocketClientPolicy(f"ws://127.0.0.1:{port}", api_key="wrong")
        client = WebsocketClientPolicy(f"ws://127.0.0.1:{port}", api_key="sesame")
        assert client.get_server_metadata()["server"] == "rollbench"
        reply = client.infer({"observation/state": np.zeros(2), "observation/environment_state": np.array([0, 0, 0.3, 0.0])})
        assert np.allclose(reply["actions"], [[1.0, 0.0]])
        req = urllib.request.Request(f"http://127.0.0.1:{port}/stats", headers={"Authorization": "Api-Key sesame"})
        with urllib.request.urlopen(req) as r:
            stats = json.loads(r.read())
        assert stats["calls"] == 1 and stats["errors"] == 1  # the refused connection


def test_openpi_client_episodes_through_rollbench_serve_match_the_expert() -> None:
    """openpi's own WebsocketClientPolicy drives fake episodes; every action is the expert's."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from rollbench.benchmarks.fake import FakeConfig

    bench = FakeConfig()
    with rollbench_server(policy__type="expert", env__type="fake") as server:
        client = WebsocketClientPolicy(server.url)
        for i, task in enumerate(["near", "mid", "far", "mid"]):
            env = bench.make_task_env(task)
            obs, _ = env.reset(seed=100 + i)
            expert = bench.expert(task)
            for _ in range(20):
                feats = bench.to_features({k: np.asarray(v)[None] for k, v in obs.items()})
                reply = client.infer({"observation/state": feats["observation.state"][0],
                                      "observation/environment_state": feats["observation.environment_state"][0],
                                      "prompt": bench.task_description(task), "task": task, "episode": {"id": i}})
                want = expert({k: v[0] for k, v in feats.items()})
                assert reply["actions"].shape == (1, 2) and np.array_equal(reply["actions"][0], want)
                obs, _, terminated, truncated, _ = env.step(reply["actions"][0])
                if terminated or truncated:
                    break
        assert server.server.stats.snapshot()["errors"] == 0


def test_vla_eval_connection_through_rollbench_serve_matches_the_expert() -> None:
    import anyio
    from vla_eval.connection import Connection

    from rollbench.benchmarks.fake import FakeConfig

    bench = FakeConfig()

    async def episode(url: str) -> list[tuple[np.ndarray, np.ndarray]]:
        pairs = []
        async with Connection(url, timeout=10) as conn:
            assert conn.server_info["model_server"] == "rollbench"
            await conn.start_episode({"task": {"name": "far", "suite": "all"}})
            env = bench.make_task_env("far")
            obs, _ = env.reset(seed=3)
            for _ in range(10):
                action = await conn.act({"state": obs["agent_pos"], "environment_state": obs["environment_state"],
                                         "task_description": "reach a far target"})
                want = bench.expert("far")({"observation.environment_state": obs["environment_state"]})
                pairs.append((np.asarray(action["actions"]), want))
                obs, *_ = env.step(action["actions"])
            await conn.end_episode({})
        return pairs

    with rollbench_server(policy__type="expert", env__type="fake") as server:
        pairs = anyio.run(episode, server.url)
    assert len(pairs) == 10 and all(np.array_equal(got, want) for got, want in pairs)


def test_malformed_frames_each_get_an_error_and_the_server_keeps_serving() -> None:
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    good = packb({"observation/state": np.zeros(2), "observation/environment_state": np.array([0.0, 0, 0.2, 0])})
    arr = {"__ndarray__": True, "data": b"\0" * 16, "dtype": "<f8", "shape": [2]}
    bad_frames: list[tuple[bytes | str, str]] = [
        (b"\xc1\xc1", "not a msgpack frame"),
        (packb([1, 2, 3]), "must be a map of observations, got list"),
        ("a text frame", "text frame"),
        (packb({"observation/state": "zero", "observation/environment_state": np.zeros(4)}), "'observation/state' is str"),
        (packb({"observation/state": np.zeros(2)}), "missing observation 'observation/environment_state'"),
        (packb({"observation/state": np.zeros(3), "observation/environment_state": np.zeros(4)}), "has shape [3], expected [2]"),
        (packb({"observation/state": {**arr, "dtype": "|O", "data": b"\0" * 8, "shape": [1]}}, "vla-eval"), "only bool, integer and float"),
        (packb({"observation/state": {**arr, "data": b"\0" * 3}}, "vla-eval"), "needs 16 bytes, got 3"),
        (packb({"type": "teleport", "payload": {}, "seq": 1, "timestamp": 0}, "vla-eval"), "unknown message type 'teleport'"),
        (packb({"type": "observation", "payload": [], "seq": 2, "timestamp": 0}, "vla-eval"), "payload is list"),
        (packb({**{"observation/state": np.zeros(2), "observation/environment_state": np.zeros(4)}, "episode": {"id": 1, "seed": "x"}}),
         "episode seed is str"),
    ]
    with rollbench_server(policy__type="expert", env__type="fake", env__task="near", serve__max_message_mb="0.01",
                          api_key="k") as server:
        headers = {"Authorization": "Api-Key k"}
        with connect(server.url, additional_headers=headers) as ws:
            ws.recv(timeout=5)  # the greeting
            for frame, message in bad_frames:
                ws.send(frame)
                reply = ws.recv(timeout=5)
                text = reply if isinstance(reply, str) else str(unpackb(reply)["payload"]["error"])
                assert message in text, (message, text)
                ws.send(good)  # the same connection still serves
                assert unpackb(ws.recv(timeout=5))["actions"].shape == (1, 2)
        with connect(server.url, additional_headers=headers, max_size=None) as ws:
            ws.recv(timeout=5)
            ws.send(packb({"observation/state": np.zeros(20_000)}))  # 160 kB > 0.01 MiB
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        with pytest.raises(InvalidStatus, match="401"):
            connect(server.url, additional_headers={"Authorization": "Api-Key nope"})
        with connect(server.url, additional_headers=headers) as ws:  # still serving
            ws.recv(timeout=5)
            ws.send(good)
            assert unpackb(ws.recv(timeout=5))["actions"].shape == (1, 2)
        stats = server.server.stats.snapshot()
    assert stats["errors"] == len(bad_frames) + 1  # the frames and the refused key


def test_an_episode_that_cannot_start_costs_only_its_own_requests() -> None:
    """Two clients in one batch: the one whose episode's reset raises gets errors, the other actions."""
    from websockets.sync.client import connect

    obs = {"observation/state": np.zeros(2), "observation/environment_state": np.array([0.0, 0, 0.2, 0])}
    with rollbench_server(policy__type="module", policy__path="helpers_remote:picky", env__type="fake",
                          serve__max_wait_ms="300") as server:
        with connect(server.url) as bad, connect(server.url) as good:
            bad.recv(timeout=5)
            good.recv(timeout=5)
            bad.send(packb({**obs, "task": "nope", "episode": {"id": 1}}))
            good.send(packb({**obs, "task": "near", "episode": {"id": 1}}))
            assert "cannot start episode 'nope' #0: ValueError: picky: no task nope" in bad.recv(timeout=5)
            assert unpackb(good.recv(timeout=5))["actions"].shape == (1, 2)
            bad.send(packb({**obs, "task": "nope", "episode": {"id": 1}}))  # the same episode: the same error
            assert "cannot start episode 'nope'" in bad.recv(timeout=5)
        stats = server.server.stats.snapshot()
    assert stats["calls"] == 1 and stats["rows"] == 1  # both first requests were one batch; the bad row never ran


@pytest.mark.parametrize("protocol", ["openpi", "vla-eval"])
def test_a_server_side_policy_error_stops_the_run_with_the_servers_message(cli, tmp_path: Path, protocol: str) -> None:
    with rollbench_server(policy__type="module", policy__path="helpers_policies:wrong_shape", env__type="fake") as server:
        res = _eval(cli, tmp_path / "o", "--policy.type=remote", f"--policy.url={server.url}", f"--policy.protocol={protocol}",
                    "--workers=1")
    assert res.rc == 1
    errors = [ln for ln in res.err.splitlines() if ln.startswith("rollbench: error:")]
    assert len(errors) == 1, res.err
    assert f"policy server {server.url} reported an error: rollbench serve: policy 'module'" in errors[0]
    assert "returned actions of shape (1, 2, 3)" in errors[0]
