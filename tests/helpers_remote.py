"""Servers for the remote-policy tests: rollbench serve in a thread or a process, openpi's
and vla-eval's own servers around a fake-benchmark expert, and a server that never answers.

`python tests/helpers_remote.py --policy.type=... --port=N` runs `rollbench serve` (the
command body, `serve_main`) as a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

TESTS = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, timeout: float = 30.0, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no server on port {port} after {timeout} s")


@contextlib.contextmanager
def rollbench_server(**flags: str) -> Iterator[Any]:
    """`rollbench serve` in a thread of this process; yields the BackgroundServer."""
    from rollbench.serve import BackgroundServer, build_server

    flags.setdefault("port", "0")
    server, policy = build_server({k.replace("__", "."): v for k, v in flags.items()})
    bg = BackgroundServer(server)
    bg.start()
    try:
        yield bg
    finally:
        bg.stop()
        policy.close()


def serve_process(port: int, *flags: str, stderr: Any = subprocess.PIPE, **env: str) -> subprocess.Popen[Any]:
    """`rollbench serve` as a real process on `port` (healthy when this returns)."""
    from conftest import subprocess_env

    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "helpers_remote.py"), f"--port={port}", *flags],
        stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=subprocess_env(**env),
    )
    wait_healthy(port, timeout=120, proc=proc)
    return proc


# -- peers around the fake benchmark's expert -------------------------------------------


def fake_expert_action(env_state: np.ndarray) -> np.ndarray:
    from rollbench.benchmarks.fake import _expert

    return _expert({"observation.environment_state": env_state})


class OpenpiExpert:
    """An openpi `BasePolicy`: a chunk of `horizon` copies of the fake expert's action; counts calls."""

    def __init__(self, horizon: int = 1) -> None:
        self.horizon = horizon
        self.calls = 0
        self.prompts: list[str] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        self.prompts.append(obs.get("prompt", ""))
        action = fake_expert_action(np.asarray(obs["observation/environment_state"]))
        return {"actions": np.stack([action] * self.horizon)}

    def reset(self) -> None:
        pass


class _Picky:
    """Zeros; its reset raises for a task the fake benchmark does not have."""

    def __init__(self, ctx: Any) -> None:
        self.tasks = {t for names in ctx.benchmark.tasks().values() for t in names}

    def reset(self, slots: Any, episodes: Any) -> None:
        for ep in episodes:
            if ep.task not in self.tasks:
                raise ValueError(f"picky: no task {ep.task}")

    def act(self, batch: Any, slots: Any) -> np.ndarray:
        return np.zeros((len(slots), 2), dtype=np.float32)


def picky(ctx: Any) -> _Picky:
    return _Picky(ctx)


def openpi_server_thread(policy: Any) -> int:
    """openpi's own `WebsocketPolicyServer` around `policy`, in a daemon thread; its port."""
    from openpi_server.websocket_policy_server import WebsocketPolicyServer

    port = free_port()
    server = WebsocketPolicyServer(policy, host="127.0.0.1", port=port, metadata={"peer": "openpi"})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    wait_healthy(port)
    return port


def vla_eval_server_thread() -> int:
    """vla-eval's own model server (`serve_async`) around the fake expert, in a daemon thread."""
    import anyio
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import serve_async

    class Expert(PredictModelServer):
        def predict(self, obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"actions": fake_expert_action(np.asarray(obs["environment_state"]))}

        def get_action_spec(self) -> dict[str, Any]:
            return {}

        def get_observation_spec(self) -> dict[str, Any]:
            return {}

    port = free_port()
    threading.Thread(target=lambda: anyio.run(serve_async, Expert(), "127.0.0.1", port), daemon=True).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("vla-eval server did not start")


def silent_server_thread() -> int:
    """Greets like openpi, then reads every request and never answers."""
    from websockets.asyncio.server import serve

    from rollbench.remote.wire import packb

    port = free_port()
    ready = threading.Event()

    async def handler(ws: Any) -> None:
        await ws.send(packb({"peer": "silent"}))
        async for _ in ws:
            pass

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port):
            ready.set()
            await asyncio.Future()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(10)
    return port


if __name__ == "__main__":
    from rollbench.cli import parse_flags
    from rollbench.serve import serve_main

    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    flags, _ = parse_flags(sys.argv[1:])
    sys.exit(serve_main(flags))
