"""`rollbench serve`: any rollbench policy behind a websocket, in both dialects on one port.

    connection ─▶ reader: decode, map keys, episode state ─▶ queue ─▶ batcher ─▶ one policy call
    (one task each)  (a bad frame: error frame, go on)         (all connections) (a thread: the
    ◀── writer: replies in request order ◀──────────────── futures ◀──────────  loop keeps serving)

Every connection gets a greeting on connect that is both openpi's metadata frame and a
vla-eval `hello` reply, so openpi clients (which wait for metadata) and vla-eval clients
(which send `hello` and wait for one) both proceed; each frame's dialect is read from its
shape (an envelope or a bare map). Episode state is per connection: a vla-eval connection
is one session; an openpi connection holds one session per `episode.slot` its requests
name (rollbench's client multiplexes a worker's slots), or one for a plain openpi client.
A session gets a server-wide slot, and `policy.reset` runs when its episode changes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import numpy as np

from rollbench.config.env import BenchmarkConfig
from rollbench.errors import PolicyError
from rollbench.policies.base import EpisodeStart, Policy, check_actions
from rollbench.policies.weights import WeightWatch, torch_modules
from rollbench.remote.keys import PROMPT_KEY, KeyMap
from rollbench.remote.wire import (
    PROTOCOL_VERSION,
    Dialect,
    Envelope,
    MessageType,
    ProtocolError,
    as_envelope,
    pack_envelope,
    packb,
    unpackb,
)
from rollbench.version import __version__

log = logging.getLogger(__name__)

META_KEYS = frozenset({"prompt", "task", "episode", "task_description"})


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_batch_size: int = 32
    max_wait_ms: float = 2.0
    max_message_mb: float = 64.0
    stats_every_s: float = 10.0
    keys: Mapping[str, str] | None = None


@dataclass
class Session:
    """One episode stream: a vla-eval connection, or one slot of an openpi connection."""

    slot: int
    episode: Any = None  # the id of the episode it runs
    pending: EpisodeStart | None = None  # reset before its next act
    description: str = ""
    broken: str | None = None  # its episode's reset failed: every request of it gets this error


@dataclass
class Pending:
    session: Session
    obs: dict[str, np.ndarray]
    description: str
    future: asyncio.Future[Any]


class Failure(str):
    """A request's error text (the reply becomes an error frame)."""


@dataclass
class Stats:
    calls: int = 0
    rows: int = 0
    errors: int = 0
    requests: int = 0
    connections: int = 0
    open_connections: int = 0
    call_ms: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    request_ms: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            calls, rows = self.calls, self.rows
            call_ms, req_ms = np.array(self.call_ms), np.array(self.request_ms)

        def pct(a: np.ndarray, q: float) -> float | None:
            return round(float(np.percentile(a, q)), 3) if a.size else None

        return {
            "calls": calls, "rows": rows, "mean_rows_per_call": round(rows / calls, 3) if calls else None,
            "requests": self.requests, "errors": self.errors,
            "connections": self.connections, "open_connections": self.open_connections,
            "call_ms_p50": pct(call_ms, 50), "call_ms_p99": pct(call_ms, 99),
            "request_ms_p50": pct(req_ms, 50), "request_ms_p99": pct(req_ms, 99),
        }


class Connection:
    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        self.sessions: dict[Any, Session] = {}
        self.dialect: Dialect = "openpi"

    def session(self, key: Any) -> Session:
        if key not in self.sessions:
            self.sessions[key] = Session(self.server.take_slot())
        return self.sessions[key]

    def close(self) -> None:
        for s in self.sessions.values():
            self.server.free_slots.append(s.slot)
        self.sessions.clear()


class PolicyServer:
    """Serves `policy` (built for `benchmark`) to every connection, batching their requests."""

    def __init__(self, policy: Policy, action_space: Any, benchmark: BenchmarkConfig, opts: ServerOptions, name: str) -> None:
        self.policy = policy
        self.action_space = action_space
        self.benchmark = benchmark
        self.opts = opts
        self.name = name
        self.stats = Stats()
        # a policy that changes its weights while it acts (test-time training) answers each
        # client after what it learnt from the others: refused at its first change, as eval does
        self.watch: WeightWatch | None = None  # begun at the first call, as StepContext.act begins it
        self.tainted: str | None = None
        self.required = {k: tuple(f.shape) for k, f in benchmark.features.items() if f.type in ("STATE", "ENV", "VISUAL")}
        known = frozenset(self.required)
        self.keymaps = {d: KeyMap(d, benchmark.type_name, opts.keys, known) for d in ("openpi", "vla-eval")}  # type: ignore[arg-type]
        tasks = [t for names in benchmark.tasks().values() for t in names]
        self.default_task = tasks[0] if len(set(tasks)) == 1 else ""
        self.free_slots: list[int] = []
        self._next_slot = 0
        self.port: int | None = None
        self._queue: asyncio.Queue[Pending] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rollbench-infer")  # one policy call at a time

    def take_slot(self) -> int:
        if self.free_slots:
            return self.free_slots.pop()
        self._next_slot += 1
        return self._next_slot - 1

    # -- HTTP: health, stats, the API key ------------------------------------------------
    def _authorised(self, headers: Any) -> bool:
        if not self.opts.api_key:
            return True
        given = str(headers.get("Authorization", ""))
        return hmac.compare_digest(given.encode(), f"Api-Key {self.opts.api_key}".encode())

    def process_request(self, connection: Any, request: Any) -> Any:
        path = request.path.split("?", 1)[0]
        if path in ("/healthz", "/health"):
            return connection.respond(HTTPStatus.OK, "OK\n")
        if not self._authorised(request.headers):
            self.stats.errors += 1
            log.warning("refused a connection from %s: wrong or missing API key", connection.remote_address)
            return connection.respond(HTTPStatus.UNAUTHORIZED, "rollbench serve: wrong or missing API key; send `Authorization: Api-Key KEY`\n")
        if path == "/stats":
            return connection.respond(HTTPStatus.OK, json.dumps(self.stats.snapshot()) + "\n")
        return None

    def greeting(self) -> bytes:
        """openpi's metadata frame and vla-eval's hello reply in one map."""
        payload = {"harness_version": f"rollbench {__version__}", "protocol_version": PROTOCOL_VERSION,
                   "model_server": "rollbench", "capabilities": {}}
        return packb({"type": MessageType.HELLO.value, "payload": payload, "seq": 0, "timestamp": time.time(),
                      "server": "rollbench", "version": __version__, "policy": self.name,
                      "dialects": ["openpi", "vla-eval"], "max_batch_size": self.opts.max_batch_size}, "vla-eval")

    # -- one connection --------------------------------------------------------------------
    async def handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed  # optional: websockets (the remote extra)

        conn = Connection(self)
        self.stats.connections += 1
        self.stats.open_connections += 1
        outbox: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()
        writer = asyncio.create_task(self._writer(ws, outbox))
        try:
            await ws.send(self.greeting())
            async for frame in ws:
                item = self._on_frame(conn, frame)
                if item is not None:
                    await outbox.put(item)
        except ConnectionClosed:
            pass
        finally:
            await outbox.put(None)
            try:
                await writer
            except ConnectionClosed:
                pass
            conn.close()
            self.stats.open_connections -= 1

    async def _writer(self, ws: Any, outbox: asyncio.Queue[tuple[Any, ...] | None]) -> None:
        """Replies in the order the requests came (openpi's replies carry no id)."""
        from websockets.exceptions import ConnectionClosed  # optional: websockets (the remote extra)

        while (item := await outbox.get()) is not None:
            dialect, seq, result = item
            if isinstance(result, asyncio.Future):
                result = await result
            if isinstance(result, Failure):
                self.stats.errors += 1
                text = f"rollbench serve: {result}"
                frame: bytes | str = text if dialect == "openpi" else pack_envelope(Envelope(MessageType.ERROR, {"error": text}, seq))
            elif dialect == "openpi":
                frame = packb({"actions": np.asarray(result)[None]}, "openpi")
            else:
                frame = pack_envelope(Envelope(MessageType.ACTION, {"actions": np.asarray(result)}, seq))
            try:
                await ws.send(frame)
            except ConnectionClosed:
                while await outbox.get() is not None:  # let the reader finish; nothing can be sent
                    pass
                return

    def _on_frame(self, conn: Connection, frame: bytes | str) -> tuple[Any, ...] | None:
        """A frame -> an outbox item (dialect, seq, future or Failure), or None (no reply)."""
        seq = 0
        try:
            obj = unpackb(frame)
            env = as_envelope(obj)
            if env is None:
                if not isinstance(obj, dict):
                    raise ProtocolError(f"a request must be a map of observations, got {type(obj).__name__}")
                conn.dialect = "openpi"
                session, description = self._openpi_session(conn, obj)
                return "openpi", 0, self._submit(session, conn.dialect, obj, description)
            conn.dialect, seq = "vla-eval", env.seq
            session = conn.session("vla-eval")
            if env.type == MessageType.EPISODE_START:
                session.pending = self._episode_start(env.payload)
                session.episode, session.description = object(), session.pending.description
                return None
            if env.type == MessageType.OBSERVATION:
                if session.episode is None:  # no episode_start: one episode for the connection
                    session.episode, session.pending = object(), self._start_for(self.default_task, "", {})
                description = env.payload.get(PROMPT_KEY["vla-eval"], session.description)
                return "vla-eval", seq, self._submit(session, "vla-eval", env.payload, str(description))
            if env.type in (MessageType.HELLO, MessageType.EPISODE_END):
                return None  # hello: the greeting sent on connect is the reply
            if env.type == MessageType.ERROR:
                log.warning("a client reported an error: %s", env.payload)
                return None
            raise ProtocolError(f"clients send hello, episode_start, observation and episode_end, not {env.type.value}")
        except ProtocolError as err:
            log.info("bad frame from a %s client: %s", conn.dialect, err)
            return conn.dialect, seq, Failure(f"bad request: {err}")

    def _start_for(self, task: str, description: str, meta: Mapping[str, Any]) -> EpisodeStart:
        def integer(name: str) -> int:
            value = meta.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ProtocolError(f"episode {name} is {type(value).__name__}, expected an integer")
            return value

        group = meta.get("task_group", meta.get("suite", ""))
        if not isinstance(task, str) or not isinstance(group, str) or not isinstance(description, str):
            raise ProtocolError("episode task, task_group and description must be strings")
        return EpisodeStart(group, task or self.default_task, description, integer("episode_index"), integer("seed"))

    def _episode_start(self, payload: Mapping[str, Any]) -> EpisodeStart:
        task = payload.get("task", {})
        if not isinstance(task, dict):
            raise ProtocolError(f"episode_start's task is {type(task).__name__}, expected a map")
        return self._start_for(task.get("name", ""), task.get("description", ""), task)

    def _openpi_session(self, conn: Connection, obj: Mapping[str, Any]) -> tuple[Session, str]:
        meta = obj.get("episode", {})
        if not isinstance(meta, dict):
            raise ProtocolError(f"`episode` is {type(meta).__name__}, expected a map (id, slot, task_group, seed, episode_index)")
        task, prompt = obj.get("task", ""), obj.get("prompt", "")
        if not isinstance(task, str) or not isinstance(prompt, str):
            raise ProtocolError("`task` and `prompt` must be strings")
        session = conn.session(meta.get("slot", "default"))
        # a plain openpi client names no episode: a new task or prompt starts one
        episode = meta.get("id", (task, prompt))
        if episode != session.episode:
            session.episode, session.pending = episode, self._start_for(task, prompt, meta)
        return session, prompt

    def _submit(self, session: Session, dialect: Dialect, request: Mapping[str, Any], description: str) -> asyncio.Future[Any]:
        obs = self.keymaps[dialect].from_wire(request, META_KEYS)
        for key, shape in self.required.items():
            wire = self.keymaps[dialect].wire_key(key) or key
            if key not in obs and wire in request:
                raise ProtocolError(f"observation {wire!r} is {type(request[wire]).__name__}, expected a numeric array")
            if key not in obs:
                got = ", ".join(sorted(str(k) for k in request if k not in META_KEYS)) or "none"
                raise ProtocolError(f"missing observation {wire!r} (rollbench key {key}, {list(shape)}); the request has: {got}")
        for key, value in obs.items():
            if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
                raise ProtocolError(f"observation {self.keymaps[dialect].wire_key(key) or key!r} is {type(value).__name__}, expected a numeric array")
            if key in self.required and value.shape != self.required[key]:
                raise ProtocolError(f"observation {self.keymaps[dialect].wire_key(key)!r} has shape {list(value.shape)}, expected {list(self.required[key])}")
        assert self._queue is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.stats.requests += 1
        self._queue.put_nowait(Pending(session, obs, description, future))
        return future

    # -- batching ----------------------------------------------------------------------------
    async def _batcher(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        queue, limit, wait_s = self._queue, self.opts.max_batch_size, self.opts.max_wait_ms / 1000
        while True:
            items = [await queue.get()]
            deadline = loop.time() + wait_s
            while len(items) < limit:
                if not queue.empty():
                    items.append(queue.get_nowait())
                    continue
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            started = time.perf_counter()
            results = await loop.run_in_executor(self._executor, self._infer, items)
            done = time.perf_counter()
            for item, result in zip(items, results, strict=True):
                if not item.future.done():
                    item.future.set_result(result)
            with self.stats.lock:
                self.stats.request_ms.extend([(done - started) * 1000] * len(items))

    def _infer(self, items: list[Pending]) -> list[Any]:
        """In the inference thread: one policy call per group of rows with the same keys and
        shapes, at most one row per slot in a call (a client that pipelines one slot)."""
        results: list[Any] = [None] * len(items)
        todo = list(range(len(items)))
        while todo:
            groups: dict[tuple[Any, ...], list[int]] = {}
            seen: set[int] = set()
            later = []
            for i in todo:
                slot = items[i].session.slot
                if slot in seen:
                    later.append(i)
                    continue
                seen.add(slot)
                sig = tuple(sorted((k, v.shape, v.dtype.str) for k, v in items[i].obs.items()))
                groups.setdefault(sig, []).append(i)
            for rows in groups.values():
                self._call(items, rows, results)
            todo = later
        return results

    def _call(self, items: list[Pending], rows: list[int], results: list[Any]) -> None:
        started = time.perf_counter()
        fresh = [items[i].session for i in rows if items[i].session.pending is not None]
        if fresh:
            self._reset(fresh)
        for i in rows:
            if items[i].session.broken is not None:
                results[i] = Failure(items[i].session.broken)
        rows = [i for i in rows if items[i].session.broken is None]
        if not rows:
            return
        slots = [items[i].session.slot for i in rows]
        try:
            actions = self._act(items, rows, slots)
            for n, i in enumerate(rows):
                results[i] = actions[n]
        except Exception as err:
            text = Failure(str(err) if isinstance(err, PolicyError) else f"policy {self.name} raised {type(err).__name__}: {err}")
            log.warning("policy call of %d rows failed: %s", len(rows), text)
            for i in rows:
                results[i] = text
        ms = (time.perf_counter() - started) * 1000
        with self.stats.lock:
            self.stats.calls += 1
            self.stats.rows += len(rows)
            self.stats.call_ms.append(ms)
        log.debug("policy call: %d rows in %.2f ms", len(rows), ms)

    def _act(self, items: list[Pending], rows: list[int], slots: list[int]) -> np.ndarray:
        """The policy's checked actions for the requests `rows` of `items` (in `slots`); a
        PolicyError when the policy has changed its weights since its first call (it trains at
        test time), found in this call or before."""
        if self.tainted is not None:
            raise PolicyError(self.tainted)
        batch: dict[str, Any] = {k: np.stack([items[i].obs[k] for i in rows]) for k in items[rows[0]].obs}
        batch["task"] = [items[i].description for i in rows]
        if self.watch is None:
            self.watch = WeightWatch(torch_modules(self.policy))
        actions = check_actions(self.policy.act(batch, slots), len(rows), self.action_space, self.name)
        changed = self.watch.changed() if len(self.watch) else 0
        if changed:
            self.tainted = (
                f"policy {self.name} changed {changed} of its {len(self.watch)} parameter tensors since its first "
                f"call (it trains at test time): each answer would depend on every request before it, from any "
                f"client; serve it with --policy.fresh_weights=true to give every episode its own copy of the weights"
            )
            log.error("%s", self.tainted)
            raise PolicyError(self.tainted)
        return actions

    def _reset(self, sessions: list[Session]) -> None:
        """Start the sessions' new episodes: one call, or one per session when it fails, so
        that one client's bad episode (an unknown task) costs only its own requests."""
        starts = [s.pending for s in sessions if s.pending is not None]
        for s in sessions:
            s.pending, s.broken = None, None
        try:
            self.policy.reset([s.slot for s in sessions], starts)
            return
        except Exception:  # some episode cannot start: find out which, one by one
            pass
        for s, ep in zip(sessions, starts, strict=True):
            try:
                self.policy.reset([s.slot], [ep])
            except Exception as err:
                s.broken = f"policy {self.name} cannot start episode {ep.task!r} #{ep.episode_index}: {type(err).__name__}: {err}"
                log.warning("%s", s.broken)

    async def _report(self) -> None:
        last = 0
        while True:
            await asyncio.sleep(self.opts.stats_every_s)
            s = self.stats.snapshot()
            if s["calls"] != last:
                last = s["calls"]
                log.info("served %d calls, %d rows (%.2f rows/call), call p50 %s ms p99 %s ms, %d connections open",
                         s["calls"], s["rows"], s["mean_rows_per_call"], s["call_ms_p50"], s["call_ms_p99"], s["open_connections"])

    # -- running -----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, ready: Callable[[int], None] | None = None) -> None:
        from websockets.asyncio.server import serve  # optional: websockets (the remote extra)

        self._queue = asyncio.Queue()
        tasks = [asyncio.create_task(self._batcher()), asyncio.create_task(self._report())]
        try:
            async with serve(self.handle, self.opts.host, self.opts.port, process_request=self.process_request,
                             max_size=int(self.opts.max_message_mb * 2**20), compression=None) as server:
                self.port = int(next(iter(server.sockets)).getsockname()[1])
                log.info("rollbench serve: policy %s on ws://%s:%d (openpi and vla-eval; /healthz)", self.name, self.opts.host, self.port)
                if ready is not None:
                    ready(self.port)
                await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)


class BackgroundServer:
    """A PolicyServer on its own event loop in a thread (tests, benchmarks, embedding)."""

    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="rollbench-serve", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def go() -> None:
            self._stop = asyncio.Event()
            await self.server.run(self._stop, lambda _port: self._ready.set())

        try:
            self._loop.run_until_complete(go())
        except BaseException as err:
            self._error = err
            self._ready.set()

    def start(self, timeout: float = 10.0) -> int:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None or self.server.port is None:
            raise RuntimeError(f"rollbench serve did not start: {self._error!r}")
        return self.server.port

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"ws://{self.server.opts.host}:{self.server.port}"
