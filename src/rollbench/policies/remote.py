"""A policy behind a websocket server: `--policy.type=remote --policy.url=ws://HOST:PORT`.

Two dialects (docs/remote.md, `rollbench.remote.wire`): openpi's (one connection per
process; every slot's request carries its whole observation, the reply's `actions` is a
chunk of which `--policy.replan_steps` are executed before the slot asks again) and
vla-eval's (one connection per slot, as its sessions are per connection: `episode_start`
at reset, one `observation` -> `action` per step). `--policy.protocol=auto` takes openpi
when the server speaks first (openpi sends its metadata on connect, `rollbench serve`
a greeting both dialects accept), vla-eval otherwise.

The requests of all the slots a call needs are sent before any reply is awaited, so a
server that batches (`rollbench serve`) sees them together. Every wait is bounded by
`--policy.timeout_s` of silence; connecting retries with backoff. A lost, silent or failing
server mid-run: a lost connection raises `EpisodesLost` for the episodes in flight (a
server that restarted has lost their state — a session, a history — so they cannot go
on) and the next request connects again, with the same retries and backoff: the
schedulers run those episodes again from their start, each retry one of
`--eval.max_retries`. A server that does not come back within the retries, one that
stays silent past `--policy.timeout_s`, or one that answers with an error raises
`RemoteError` (a `PolicyError`): the run stops, its finished episodes are in the log, and
rerunning the command resumes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rollbench.config.fields import build, opt
from rollbench.errors import ConfigError, EpisodesLost, PolicyError, did_you_mean
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext
from rollbench.remote.keys import PROMPT_KEY, KeyMap, parse_keys
from rollbench.remote.wire import (
    Dialect,
    Envelope,
    MessageType,
    ProtocolError,
    as_envelope,
    first_line,
    pack_envelope,
    packb,
    unpackb,
)

log = logging.getLogger(__name__)

INSTALL_HINT = "install it with `pip install 'rollbench[remote]'` (websockets, msgpack)"
GREETING_WAIT_S = 1.0  # auto: how long to wait for a server that speaks first (openpi)


class RemoteError(PolicyError):
    """The policy server failed, went silent or could not be reached again during a run."""


class LinkLost(Exception):
    """The connection broke (not a timeout, not an error frame): the server may be back soon."""


@dataclass(frozen=True)
class RemoteOptions:
    """`--policy.*` flags of `--policy.type=remote`."""

    url: str = opt("", "ws://HOST:PORT (or wss://) of the policy server")
    protocol: Literal["auto", "openpi", "vla-eval"] = opt("auto", "wire dialect; auto: openpi when the server speaks first")
    replan_steps: int = opt(5, "openpi: env steps executed from each reply's action chunk before the slot asks again")
    api_key: str | None = opt(None, "sent as `Authorization: Api-Key KEY`; default $ROLLBENCH_API_KEY")
    timeout_s: float = opt(30.0, "seconds without a reply (or a connection) before the request fails")
    connect_retries: int = opt(3, "connection attempts after the first, with backoff 0.5 s, 1 s, 2 s, ...")
    keys: str | None = opt(None, "observation keys: rollbench_key=wire_key,... or @file.json (default: per benchmark)")
    max_message_mb: float = opt(64.0, "largest reply accepted, in MiB")

    def __post_init__(self) -> None:
        if not self.url.startswith(("ws://", "wss://")):
            raise ConfigError(f"--policy.url={self.url!r} is not allowed; --policy.type=remote needs ws://HOST:PORT or wss://HOST:PORT")
        if self.replan_steps < 1:
            raise ConfigError(f"--policy.replan_steps={self.replan_steps} is not allowed; it must be >= 1")
        if not self.timeout_s > 0:
            raise ConfigError(f"--policy.timeout_s={self.timeout_s} is not allowed; it must be > 0")
        if self.connect_retries < 0:
            raise ConfigError(f"--policy.connect_retries={self.connect_retries} is not allowed; it must be >= 0")
        if not self.max_message_mb > 0:
            raise ConfigError(f"--policy.max_message_mb={self.max_message_mb} is not allowed; it must be > 0")


class Link:
    """One websocket connection; every wait bounded."""

    def __init__(self, opts: RemoteOptions, api_key: str | None) -> None:
        self.opts = opts
        self.api_key = api_key
        self.ws: Any = None
        self.seq = 0
        self.greeting: Any = None  # the first frame a server that speaks first sent

    def open(self, greeting_wait: float | None) -> None:
        """Connect (with retries and backoff); wait up to `greeting_wait` s for a first frame."""
        try:
            from websockets.exceptions import InvalidStatus  # optional: websockets (the remote extra)
            from websockets.sync.client import connect  # optional: websockets (the remote extra)
        except ImportError as err:
            raise ConfigError(f"--policy.type=remote needs websockets ({err}); {INSTALL_HINT}") from None
        headers = {"Authorization": f"Api-Key {self.api_key}"} if self.api_key else None
        url, last = self.opts.url, ""
        for attempt in range(self.opts.connect_retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                conn = connect(
                    url, additional_headers=headers, open_timeout=self.opts.timeout_s, close_timeout=1,
                    max_size=int(self.opts.max_message_mb * 2**20), compression=None,
                )
                # entered, as websockets >= 17.1 wants; `close()` below ends it
                self.ws = conn.__enter__()
                break
            except InvalidStatus as err:
                code = err.response.status_code
                body = first_line(err.response.body.decode("utf-8", "replace")) if err.response.body else ""
                why = " (wrong or missing --policy.api_key)" if code in (401, 403) else ""
                raise ConfigError(f"--policy.url={url}: the server refused the connection with HTTP {code}{why}: {body}") from None
            except Exception as err:  # refused, unreachable, a failed handshake: try again
                last = f"{type(err).__name__}: {err}"
        else:
            raise ConfigError(
                f"--policy.url={url}: cannot connect after {self.opts.connect_retries + 1} attempts ({last}); "
                f"is the server running (e.g. `rollbench serve --port=...`)?"
            )
        if greeting_wait is not None:
            try:
                frame = self.ws.recv(timeout=greeting_wait)
            except TimeoutError:
                return
            except Exception as err:
                raise ConfigError(f"--policy.url={url}: the connection closed at once ({type(err).__name__}: {err})") from None
            self.greeting = self._decode(frame)

    def _decode(self, frame: bytes | str) -> Any:
        if isinstance(frame, str):  # openpi servers report errors as text frames
            raise RemoteError(f"policy server {self.opts.url} reported an error: {first_line(frame)}")
        try:
            return unpackb(frame)
        except ProtocolError as err:
            raise RemoteError(f"policy server {self.opts.url} sent a frame rollbench cannot read: {err}") from None

    def send(self, data: bytes) -> None:
        try:
            self.ws.send(data)
        except Exception as err:
            raise LinkLost(f"policy server {self.opts.url}: connection lost while sending ({type(err).__name__}: {err})") from None

    def recv(self, what: str) -> Any:
        """The next frame, decoded; RemoteError after `timeout_s` of silence or on loss."""
        try:
            frame = self.ws.recv(timeout=self.opts.timeout_s)
        except TimeoutError:
            raise RemoteError(
                f"policy server {self.opts.url} sent no {what} within {self.opts.timeout_s:g} s (--policy.timeout_s); {RERUN}"
            ) from None
        except Exception as err:
            raise LinkLost(f"policy server {self.opts.url}: connection lost waiting for {what} ({type(err).__name__}: {err})") from None
        return self._decode(frame)

    def envelope(self, kind: MessageType, payload: dict[str, Any]) -> int:
        self.seq += 1
        self.send(pack_envelope(Envelope(kind, payload, self.seq)))
        return self.seq

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:  # already gone
                pass
            self.ws = None


RERUN = "the run stops; finished episodes are kept and rerunning the same command resumes"


class RemotePolicy(Policy):
    """Actions from a policy server, one chunk queue per slot."""

    options_class = RemoteOptions
    cheap = True  # network I/O only: runs inside every env worker, one connection each
    per_slot_state = True

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        names = [f.name for f in dataclasses.fields(RemoteOptions)]
        for key in ctx.config.options:
            if key not in names:
                hint = did_you_mean(key, names, "--policy.{}".format)
                raise ConfigError(f"unknown flag --policy.{key} for --policy.type=remote.{hint} Known: {', '.join('--policy.' + n for n in names)}")
        self.opts = build(RemoteOptions, ctx.config.options, "policy.")
        self.api_key = self.opts.api_key or os.environ.get("ROLLBENCH_API_KEY") or None
        self.steps_per_inference = self.opts.replan_steps
        self.action_shape: tuple[int, ...] = tuple(getattr(ctx.action_space, "shape", None) or ())
        self._queues: dict[int, deque[np.ndarray]] = {}
        self._episodes: dict[int, tuple[EpisodeStart, str]] = {}
        self._links: dict[int, Link] = {}  # vla-eval: one per slot
        self._spare: list[Link] = []
        self._stale: set[int] = set()  # slots whose episode the server lost with a connection
        self._count = 0
        first = Link(self.opts, self.api_key)
        wait = GREETING_WAIT_S if self.opts.protocol == "auto" else (self.opts.timeout_s if self.opts.protocol == "openpi" else None)
        first.open(wait)
        if self.opts.protocol == "openpi" and first.greeting is None:
            first.close()
            raise ConfigError(f"--policy.url={self.opts.url}: no metadata frame within {self.opts.timeout_s:g} s; not an openpi server? (--policy.protocol=vla-eval)")
        self.dialect: Dialect = "openpi" if first.greeting is not None and self.opts.protocol != "vla-eval" else "vla-eval"
        self.metadata: Any = first.greeting
        explicit = parse_keys("--policy.keys", self.opts.keys)
        self.keymap = KeyMap(self.dialect, ctx.benchmark.type_name, explicit)
        if self.dialect == "openpi":
            self.link: Link | None = first
        else:
            self.link = None
            self._hello(first)
            self._spare.append(first)
        log.info("remote policy %s: %s dialect", self.opts.url, self.dialect)

    # -- vla-eval sessions -------------------------------------------------------------
    def _hello(self, link: Link) -> None:
        if link.greeting is None:  # a server that spoke first has greeted already
            link.envelope(MessageType.HELLO, {"harness_version": "rollbench", "protocol_version": 1})
            reply = as_envelope(link.recv("hello"))
            if reply is None or reply.type != MessageType.HELLO:
                raise ConfigError(f"--policy.url={self.opts.url}: expected a vla-eval hello reply, got {reply.type.value if reply else 'a bare map'}")
            link.greeting = reply.payload
        self.metadata = link.greeting

    def _link_for(self, slot: int) -> Link:
        if slot not in self._links:
            if self._spare:
                self._links[slot] = self._spare.pop()
            else:
                link = Link(self.opts, self.api_key)
                try:
                    link.open(None)  # the dialect is settled: no wait for a greeting
                    self._hello(link)
                except ConfigError as err:  # mid-run, a lost server is the run's failure, not the config's
                    link.close()
                    raise RemoteError(f"{err}; {RERUN}") from None
                self._links[slot] = link
        return self._links[slot]

    def _openpi_link(self) -> Link:
        if self.link is None:  # the last one broke: connect again (with retries and backoff)
            link = Link(self.opts, self.api_key)
            try:
                link.open(self.opts.timeout_s)
            except ConfigError as err:
                link.close()
                raise RemoteError(f"{err}; {RERUN}") from None
            if link.greeting is None:
                link.close()
                raise RemoteError(f"policy server {self.opts.url} sent no metadata after reconnecting; {RERUN}")
            self.link = link
            log.warning("remote policy %s: connected again", self.opts.url)
        return self.link

    def _lose_everything(self) -> None:
        """A connection broke: every episode this policy runs lost its server-side state."""
        self._stale.update(self._episodes)
        self._queues.clear()
        for link in [*self._links.values(), *self._spare, *([self.link] if self.link else [])]:
            link.close()
        self._links, self._spare, self.link = {}, [], None

    # -- the policy protocol -----------------------------------------------------------
    def reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        try:
            self._reset(slots, episodes)
        except LinkLost:  # nothing ran yet in these episodes: start them on a new connection
            self._lose_everything()
            try:
                self._reset(slots, episodes)
            except LinkLost as err:
                self._lose_everything()
                raise RemoteError(f"{err}; {RERUN}") from None

    def _reset(self, slots: Sequence[int], episodes: Sequence[EpisodeStart]) -> None:
        for slot, ep in zip(slots, episodes, strict=True):
            self._queues.pop(slot, None)
            self._stale.discard(slot)
            self._count += 1
            had = slot in self._links
            self._episodes[slot] = (ep, f"{os.getpid()}-{slot}-{self._count}")
            if self.dialect == "vla-eval":
                link = self._link_for(slot)
                if had:
                    link.envelope(MessageType.EPISODE_END, {})
                link.envelope(MessageType.EPISODE_START, {"task": self._task_info(ep)})

    @staticmethod
    def _task_info(ep: EpisodeStart) -> dict[str, Any]:
        return {"name": ep.task, "suite": ep.task_group, "description": ep.description, "seed": ep.seed, "episode_index": ep.episode_index}

    def act(self, batch: Mapping[str, Any], slots: Sequence[int]) -> np.ndarray:
        stale = [s for s in slots if s in self._stale]
        if stale:
            raise EpisodesLost(f"policy server {self.opts.url}: the connection of these episodes broke", stale)
        dry = [j for j, s in enumerate(slots) if not self._queues.get(s)]
        if dry:
            try:
                chunks = self._request(batch, slots, dry)
            except LinkLost as err:
                self._lose_everything()
                raise EpisodesLost(f"{err}; its episodes run again on a new connection", slots) from None
            for j, chunk in zip(dry, chunks, strict=True):
                self._queues[slots[j]] = deque(chunk[: self.opts.replan_steps])
        return np.stack([self._queues[s].popleft() for s in slots])

    def _row(self, batch: Mapping[str, Any], j: int) -> dict[str, Any]:
        return {k: np.asarray(v)[j] for k, v in batch.items() if k != "task"}

    def _request(self, batch: Mapping[str, Any], slots: Sequence[int], rows: list[int]) -> list[np.ndarray]:
        descriptions = list(batch.get("task", [""] * len(slots)))
        if self.dialect == "openpi":
            link = self._openpi_link()
            for j in rows:
                ep, ep_id = self._episode(slots[j])
                req = self.keymap.to_wire(self._row(batch, j))
                req[PROMPT_KEY["openpi"]] = descriptions[j]
                req["task"] = ep.task
                req["episode"] = {"id": ep_id, "slot": int(slots[j]), "task_group": ep.task_group, "seed": ep.seed, "episode_index": ep.episode_index}
                link.send(packb(req, "openpi"))
            return [self._chunk(link.recv("reply"), slots[j]) for j in rows]
        seqs = []
        for j in rows:
            obs = self.keymap.to_wire(self._row(batch, j))
            obs[PROMPT_KEY["vla-eval"]] = descriptions[j]
            seqs.append(self._link_for(slots[j]).envelope(MessageType.OBSERVATION, obs))
        out = []
        for j, seq in zip(rows, seqs, strict=True):
            link = self._links[slots[j]]
            while True:
                msg = as_envelope(link.recv("action"))
                if msg is None:
                    raise RemoteError(f"policy server {self.opts.url} replied a bare map to a vla-eval observation; expected an action")
                if msg.type == MessageType.ERROR:
                    raise RemoteError(f"policy server {self.opts.url} reported an error: {first_line(str(msg.payload.get('error', msg.payload)))}")
                if msg.type == MessageType.ACTION:
                    if msg.seq not in (seq, 0):
                        raise RemoteError(f"policy server {self.opts.url} answered observation {seq} with seq {msg.seq}")
                    out.append(self._chunk(msg.payload, slots[j]))
                    break
        return out

    def _episode(self, slot: int) -> tuple[EpisodeStart, str]:
        if slot not in self._episodes:  # a caller that never reset the slot
            self._episodes[slot] = (EpisodeStart("", "", "", 0, 0), f"{os.getpid()}-{slot}-0")
        return self._episodes[slot]

    def _chunk(self, reply: Any, slot: int) -> np.ndarray:
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            raise RemoteError(f"policy server {self.opts.url} reported an error: {first_line(reply['error'])}")
        if not isinstance(reply, dict) or "actions" not in reply:
            keys = ", ".join(map(str, reply)) if isinstance(reply, dict) else type(reply).__name__
            raise RemoteError(f"policy server {self.opts.url} replied without `actions` (got {keys})")
        chunk = np.asarray(reply["actions"])
        if chunk.ndim == len(self.action_shape):
            chunk = chunk[None]
        if chunk.shape[1:] != self.action_shape or len(chunk) == 0:
            raise RemoteError(
                f"policy server {self.opts.url} replied actions of shape {list(chunk.shape)} for slot {slot}; "
                f"expected a chunk [H, {', '.join(map(str, self.action_shape))}] or one action {list(self.action_shape)}"
            )
        return chunk

    def __copy__(self) -> RemotePolicy:
        """Lockstep's parallel tasks get their own connections (a websocket is not shared)."""
        return RemotePolicy(self.ctx)

    def close(self) -> None:
        for link in self._links.values():
            try:
                link.envelope(MessageType.EPISODE_END, {})
            except (RemoteError, LinkLost):
                pass
        for link in [*self._links.values(), *self._spare, *([self.link] if self.link else [])]:
            link.close()
        self._links, self._spare, self.link = {}, [], None
