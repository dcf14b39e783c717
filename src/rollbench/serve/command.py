"""The `rollbench serve` command: flags -> a built policy -> PolicyServer until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import textwrap
from dataclasses import dataclass

from rollbench.config.codec import benchmark_from_flags, group, policy_from_flags
from rollbench.config.env import BENCHMARKS, BenchmarkConfig
from rollbench.config.fields import build, field_help, opt
from rollbench.config.policy import PolicyConfig
from rollbench.episode.context import StepContext
from rollbench.errors import ConfigError
from rollbench.policies.base import Policy
from rollbench.policies.checkpoint import resolve_policy
from rollbench.remote.keys import parse_keys
from rollbench.serve.server import PolicyServer, ServerOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenConfig:
    port: int = opt(8000, "TCP port; 0 picks a free one (the log line says which)")
    host: str = opt("127.0.0.1", "address to bind; 0.0.0.0 exposes the server to the network (set --api_key)")
    api_key: str | None = opt(None, "require `Authorization: Api-Key KEY` on connect (openpi's header); default $ROLLBENCH_API_KEY")

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port={self.port} is not allowed; it must be 0..65535")


@dataclass(frozen=True)
class ServeConfig:
    max_batch_size: int = opt(32, "most rows in one policy call, across all connections")
    max_wait_ms: float = opt(2.0, "how long a call waits for more requests once one is queued")
    max_message_mb: float = opt(64.0, "largest frame accepted, in MiB; a larger one closes its connection (code 1009)")
    stats_every_s: float = opt(10.0, "seconds between the log lines with calls, rows per call and latency")
    keys: str | None = opt(None, "observation keys: rollbench_key=wire_key,... or @file.json (default: per benchmark, docs/remote.md)")

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ConfigError(f"--serve.max_batch_size={self.max_batch_size} is not allowed; it must be >= 1")
        if self.max_wait_ms < 0:
            raise ConfigError(f"--serve.max_wait_ms={self.max_wait_ms} is not allowed; it must be >= 0")
        if not self.max_message_mb > 0:
            raise ConfigError(f"--serve.max_message_mb={self.max_message_mb} is not allowed; it must be > 0")
        if not self.stats_every_s > 0:
            raise ConfigError(f"--serve.stats_every_s={self.stats_every_s} is not allowed; it must be > 0")


WIRE_EXAMPLE = """\
wire format (msgpack; arrays as {"__ndarray__": true, "data": <bytes>, "dtype": "<f8", "shape": [39]}):
  on connect the server sends one map, openpi's metadata and vla-eval's hello at once:
    {"type": "hello", "seq": 0, "payload": {...}, "server": "rollbench", "policy": "'expert'", ...}
  openpi dialect (openpi's WebsocketClientPolicy): a request is a bare map
    {"observation/state": <array>, "observation/environment_state": <array>, "prompt": "reach a near target",
     "task": "near", "episode": {"id": "w0-3", "slot": 3, "seed": 7, "episode_index": 0}}
  ("task" and "episode" are optional: without them one connection is one episode, and a new task or
  prompt starts the next); the reply is {"actions": <array [1, action_dim]>}; an error is a text frame.
  vla-eval dialect: envelopes {"type", "payload", "seq", "timestamp"}: hello, then
    {"type": "episode_start", "payload": {"task": {"name": "near", "suite": "all", "seed": 7, "episode_index": 0}}}
    {"type": "observation", "payload": {"state": <array>, "environment_state": <array>, "task_description": "..."}, "seq": 5}
  answered by {"type": "action", "payload": {"actions": <array [action_dim]>}, "seq": 5}, or {"type": "error", ...}.
  GET /healthz answers 200 without a key; GET /stats gives the counters as JSON."""


def serve_help() -> str:
    def rows(cls: type, prefix: str) -> str:
        out = []
        for flag, kind, text in field_help(cls, prefix):
            out.append(f"  {flag}  ({kind})")
            out.extend(textwrap.wrap(text, width=88, initial_indent="      ", subsequent_indent="      "))
        return "\n".join(out)

    return "\n".join([
        "usage: rollbench serve --policy.type=TYPE [--policy.path=...] --env.type=NAME [--env.task=...] [--port=8000] [flags]",
        "",
        "Serve a rollbench policy over a websocket, to rollbench (--policy.type=remote), openpi and vla-eval",
        "clients, on one port. Concurrent requests from all connections are batched into one policy call.",
        "--env.type/--env.task say what the policy is built for (its action space, the features it reads,",
        "the expert's tasks). Binds 127.0.0.1 unless --host says otherwise. See docs/remote.md.",
        "",
        "listen:",
        rows(ListenConfig, ""),
        "",
        "serve:",
        rows(ServeConfig, "serve."),
        "",
        "policy: the --policy.* flags of `rollbench eval` (see `rollbench eval --help`); env: its --env.* flags.",
        "",
        WIRE_EXAMPLE,
    ])


def _benchmark(env_flags: dict[str, str], trust_remote_code: str) -> BenchmarkConfig:
    if not env_flags.get("type"):
        raise ConfigError(f"rollbench serve needs --env.type (what the policy is built for); known: {', '.join(BENCHMARKS.names())}")
    bench = benchmark_from_flags(env_flags)
    if type(bench).runs_user_code and trust_remote_code.lower() != "true":
        raise ConfigError(f"--env.type={bench.type_name} imports and runs the code at the path you give; "
                          f"read it, then pass --trust_remote_code=true to allow it")
    bench = bench.resolve()
    bench.check_available()
    bench.validate_tasks()
    return bench


def _policy_config(policy_flags: dict[str, str]) -> PolicyConfig:
    if policy_flags.get("type") == "remote":
        raise ConfigError("--policy.type=remote cannot be served (a server in front of a server); serve the policy itself")
    return policy_from_flags(policy_flags)


def build_server(flags: dict[str, str]) -> tuple[PolicyServer, Policy]:
    """Flags -> a PolicyServer around a freshly built policy (not yet running)."""
    flags = dict(flags)
    flags.pop("debug", None)
    bench = _benchmark(group(flags, "env."), flags.pop("trust_remote_code", "false"))
    policy_cfg = resolve_policy(_policy_config(group(flags, "policy.")))
    serve_cfg = build(ServeConfig, group(flags, "serve."), "serve.")
    for key in flags:
        if "." in key:
            raise ConfigError(f"unknown flag --{key}; rollbench serve takes --policy.*, --env.*, --serve.*, --port, --host, --api_key")
    listen = build(ListenConfig, flags, "")
    ctx = StepContext(bench, policy_cfg)
    policy = ctx.make_policy()
    own = getattr(policy, "env_processors", None)
    if own is not None and own(bench) is not None:  # X-VLA: clients send processed observations
        policy.close()
        raise ConfigError(
            f"rollbench serve: {ctx.policy_name()} brings its own env processors, which read the env's raw "
            f"observation; clients send processed ones (the benchmark's features), so it cannot be served: "
            f"evaluate it with rollbench eval"
        )
    opts = ServerOptions(
        host=listen.host, port=listen.port, api_key=listen.api_key or os.environ.get("ROLLBENCH_API_KEY") or None,
        max_batch_size=serve_cfg.max_batch_size, max_wait_ms=serve_cfg.max_wait_ms, max_message_mb=serve_cfg.max_message_mb,
        stats_every_s=serve_cfg.stats_every_s, keys=parse_keys("--serve.keys", serve_cfg.keys),
    )
    if opts.host not in ("127.0.0.1", "localhost", "::1") and not opts.api_key:
        log.warning("serving on %s without --api_key: anyone who reaches this port can use the policy", opts.host)
    return PolicyServer(policy, ctx.action_space, bench, opts, ctx.policy_name()), policy


def serve_main(flags: dict[str, str]) -> int:
    """`rollbench serve`: serve until SIGINT or SIGTERM; 0 after a clean stop."""
    server, policy = build_server(flags)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.run(stop)

    try:
        asyncio.run(main())
    except OSError as err:  # the port is taken, the address is not ours
        raise ConfigError(f"--host={server.opts.host} --port={server.opts.port}: cannot listen ({err})") from None
    finally:
        policy.close()
        log.info("rollbench serve stopped: %s", server.stats.snapshot())
    return 0
