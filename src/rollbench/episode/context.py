"""The policy boundary every way of stepping shares: the run's benchmark, policy and step
rules (`StepContext`: reset and act with the benchmark's processors, the task strings, the
action checks, a hung call's watch, the calls counted), one whole episode (`play_episode`),
and the batch helpers around a policy call (`stack_any`, `take_rows`, `act_surviving`)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from rollbench import perturb, timeline
from rollbench.config.env import BenchmarkConfig
from rollbench.config.eval import RecordRule
from rollbench.config.policy import PolicyConfig
from rollbench.episode.tracker import EpisodeTracker, take_row
from rollbench.errors import ConfigError, EpisodesLost, PolicyError, PolicyHang
from rollbench.perturb import Perturber
from rollbench.plan import EpisodeUnit
from rollbench.policies.base import EpisodeStart, Policy, PolicyContext, check_actions, make_policy
from rollbench.policies.weights import FreshWeights, WeightWatch, torch_modules
from rollbench.results.records import EpisodeRecord

#: how often a scheduler whose every unit left is held back (`Stops.ready`: pacing) looks again
HELD_POLL_S = 0.2


#: a hung policy call in the main thread that an exception raised in it did not end after this
#: many seconds (C code that holds on) ends the process itself (`PolicyWatch`)
HANG_GRACE_S = 5.0
#: the signal that raises `PolicyHang` in the main thread (pytest-timeout owns SIGALRM)
HANG_SIGNAL = signal.SIGUSR1


@dataclass
class _Call:
    """A policy call in progress: in which thread, since when, on which episodes."""

    thread: int
    what: str  # "act" or "reset"
    episodes: Callable[[], Sequence[EpisodeUnit]]
    since: float
    message: str = ""  # set: it overran the timeout (a hang), and this says so


#: the call the main thread is inside of, for the signal handler (one main thread per process)
_main_call: _Call | None = None


def _raise_in_main(signum: int, frame: Any) -> None:
    """HANG_SIGNAL's handler: raise `PolicyHang` in the main thread's overdue policy call (a
    signal also ends a blocking sleep, lock wait or socket read); anything else ignores it."""
    call = _main_call
    if call is not None and call.message:
        raise PolicyHang(call.message)


class PolicyWatch:
    """Bounds the policy calls a scheduler makes in this process (driver placement, lockstep):
    a call that has not returned within `timeout_s` (`--eval.step_timeout_s`) is a hang.

    A call in progress cannot be stopped safely (the policy's state, a connection half-way
    through a request), so a hang ends the run in one line that names the policy, the call
    and its episodes; the episodes logged so far are durable, so the same command resumes. A watchdog thread sees the hang: in the main thread a `PolicyHang` is raised
    inside the call (`HANG_SIGNAL`); a lockstep task runner's call is seen by the main
    thread's loop (`check`). A main-thread call that does not give way within HANG_GRACE_S
    (C code that holds on) ends the process: the line on stderr, exit code 1. `timeout_s`
    None watches nothing.
    """

    def __init__(self, timeout_s: float | None, ctx: StepContext | None = None, policy: Policy | None = None) -> None:
        self.timeout_s = timeout_s
        self.ctx = ctx
        # the policy's `ready`, waited for once, unwatched (a checkpoint loading in the background)
        self.ready: Callable[[], None] | None = policy.ready if policy is not None else None
        self.hung: _Call | None = None
        self._calls: dict[int, _Call] = {}  # thread ident -> its call in progress
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def __enter__(self) -> PolicyWatch:
        if self.timeout_s is None:
            return self
        if threading.current_thread() is threading.main_thread() and signal.getsignal(HANG_SIGNAL) in (
            signal.SIG_DFL, _raise_in_main,
        ):  # installed once, and kept: a signal sent as a call ends must never meet the default (exit)
            signal.signal(HANG_SIGNAL, _raise_in_main)
        threading.Thread(target=self._watch, name="rollbench-policy-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._closed.set()

    @contextlib.contextmanager
    def call(self, what: str, episodes: Callable[[], Sequence[EpisodeUnit]]) -> Iterator[None]:
        """Watch one policy call (`what`: "act" or "reset") on the units `episodes()` names."""
        global _main_call
        if self.timeout_s is None:
            yield
            return
        if self.ready is not None:
            ready, self.ready = self.ready, None
            ready()
        ident = threading.get_ident()
        call = _Call(ident, what, episodes, time.monotonic())
        main = ident == threading.main_thread().ident
        with self._lock:
            self._calls[ident] = call
            if main:
                _main_call = call
        try:
            yield
        finally:
            if main:
                _main_call = None  # first: from here on the signal raises nothing
            with self._lock:
                self._calls.pop(ident, None)
            if call.message:  # also when it returned late, or swallowed the PolicyHang raised in it
                raise PolicyHang(call.message)

    def check(self) -> None:
        """Raise the hang a call in another thread is in (a lockstep task runner's): the run
        ends in this thread, so the watchdog has nothing more to do."""
        if self.hung is not None:
            self.__exit__()
            raise PolicyHang(self.hung.message)

    def stuck(self, thread: int | None) -> bool:
        """Whether `thread` is in a policy call that has overrun the timeout (it may never return)."""
        call = self._calls.get(thread) if thread is not None else None
        return call is not None and self.timeout_s is not None and time.monotonic() - call.since > self.timeout_s

    def _watch(self) -> None:
        assert self.timeout_s is not None
        poll = min(0.5, self.timeout_s / 4)
        while not self._closed.wait(poll):
            now = time.monotonic()
            with self._lock:
                calls = list(self._calls.values())
            for call in calls:
                if not call.message and now - call.since > self.timeout_s:
                    self._overdue(call)
                elif call.message and now - call.since > self.timeout_s + HANG_GRACE_S:
                    self._end_process(call)

    def _overdue(self, call: _Call) -> None:
        message = self._message(call)
        with self._lock:
            if self._closed.is_set() or self._calls.get(call.thread) is not call:
                return  # it returned meanwhile
            call.message = message
            self.hung = self.hung or call
            if self.ctx is not None:
                self.ctx.hung.append(message)
            if call is _main_call and signal.getsignal(HANG_SIGNAL) is _raise_in_main:
                signal.pthread_kill(call.thread, HANG_SIGNAL)

    def _end_process(self, call: _Call) -> None:
        with self._lock:
            if self._closed.is_set() or self._calls.get(call.thread) is not call:
                return
            text = f"rollbench: error: {call.message} (the call did not give way to the exception raised in it)\n"
            try:
                sys.stderr.flush()
            except Exception:  # a closed or broken stderr: the line below is what counts
                pass
            os.write(2, text.encode(errors="replace"))
            os._exit(PolicyHang.exit_code)

    def _message(self, call: _Call) -> str:
        try:
            units = list({u.key: u for u in call.episodes()}.values())  # a short batch's padding repeats a unit
        except Exception:  # read while the scheduler stands still in the call; never fail the watchdog
            units = []
        shown = ", ".join(u.label() for u in units[:5]) + (f" and {len(units) - 5} more" if len(units) > 5 else "")
        n = f"{len(units)} episode{'' if len(units) == 1 else 's'}"
        policy = f"policy {self.ctx.policy_name()}" if self.ctx is not None else "the policy"
        return (
            f"{policy} hung: its {call.what} call on {n} ({shown or 'unknown'}) did not return within "
            f"--eval.step_timeout_s={self.timeout_s:g}s, so the run stops (a call in progress cannot be stopped "
            f"safely); the episodes logged so far are kept: run the same command again to resume (raise "
            f"--eval.step_timeout_s if the policy is only slow)"
        )


@dataclass
class PolicyCalls:
    """How often a process's policy was called, and for how many rows (env slots) in all."""

    calls: int = 0
    rows: int = 0

    def add(self, calls: int, rows: int) -> None:
        self.calls += calls
        self.rows += rows

    def add_since(self, seen: tuple[int, int], now: tuple[int, int]) -> tuple[int, int]:
        """Another process's running totals (`now`; `seen` counted already): add what is new;
        the totals counted from then on (a report older than `seen` adds nothing)."""
        if now <= seen:
            return seen
        self.add(now[0] - seen[0], now[1] - seen[1])
        return now

    def to_json(self) -> dict[str, Any] | None:
        """eval_info.json's `policy_calls` (None when no call was counted)."""
        if not self.calls:
            return None
        return {"calls": self.calls, "rows": self.rows, "rows_per_call": round(self.rows / self.calls, 3)}

    @classmethod
    def total(cls, *counted: Any) -> dict[str, Any] | None:
        """The sum of several `to_json()` values (those of shards, or of the commands that ran
        one run); None and anything that is not such a value add nothing."""
        out = cls()
        for c in counted:
            if isinstance(c, dict) and isinstance(c.get("calls"), int) and isinstance(c.get("rows"), int):
                out.add(c["calls"], c["rows"])
        return out.to_json()


@dataclass(frozen=True)
class StepContext:
    """Everything needed to turn observations into actions and account the results.

    It builds policies but never holds one: whoever runs a scheduler hands it the policy
    to use (and closes it), so a checkpoint loads once per process.
    """

    benchmark: BenchmarkConfig
    policy_config: PolicyConfig
    seed: int | None = None  # the run's --seed, for policies seeded as lerobot-eval seeds them
    paraphrases: str = ""  # --eval.paraphrases (JSON): language.paraphrase's table
    #: the calls `act` made in this process (a worker's reach the driver in its reports)
    counts: PolicyCalls = field(default_factory=PolicyCalls, compare=False)
    #: --eval.perturb: the condition of each slot's episode, where it is not the control
    perturbers: dict[int, Perturber] = field(default_factory=dict, compare=False)
    #: id(policy) -> (a reference to it, the watch on its weights): `act` refuses a policy that changes them
    watches: dict[int, tuple[Callable[[], Any], WeightWatch | None]] = field(default_factory=dict, compare=False)
    #: a policy call overran --eval.step_timeout_s (`PolicyWatch`): what was said. The policy is
    #: then left as it is, not closed (its state is unknown: a close could wait for the hung call)
    hung: list[str] = field(default_factory=list, compare=False)

    @classmethod
    def of_run(cls, cfg: Any) -> StepContext:
        """The context of a run with config `cfg` (a RunConfig): what an executor's process acts with."""
        return cls(cfg.env, cfg.policy, cfg.seed, cfg.eval.paraphrases)

    @cached_property
    def action_space(self) -> Any:
        first = next(task for names in self.benchmark.tasks().values() for task in names)
        env = self.benchmark.make_task_env(first)
        try:
            return env.action_space
        finally:
            env.close()

    def make_policy(self) -> Policy:
        return self.as_run_policy(make_policy(PolicyContext(self.policy_config, self.benchmark, self.action_space, self.seed)))

    def as_run_policy(self, policy: Policy) -> Policy:
        """`policy` as the run acts with it: with --policy.fresh_weights, a copy per episode."""
        return FreshWeights(policy) if self.policy_config.fresh_weights else policy

    def _watch(self, policy: Policy) -> WeightWatch | None:
        """The watch on `policy`'s weights, begun at its first call (None: it has no torch modules)."""
        key = id(policy)
        found = self.watches.get(key)
        if found is not None and found[0]() is policy:
            return found[1]
        watch = WeightWatch(torch_modules(policy))
        watches = self.watches

        def forget(_: Any) -> None:
            watches.pop(key, None)

        ref: Callable[[], Any]
        try:  # weakly held: a lockstep task's copy of the policy goes when its task ends
            ref = weakref.ref(policy, forget)
        except TypeError:  # a duck-typed policy with __slots__: held
            ref = functools.partial(lambda p: p, policy)
        self.watches[key] = (ref, watch if len(watch) else None)
        return self.watches[key][1]

    def instruction(self, cid: str, task: str) -> str | None:
        """The instruction condition `cid` gives an episode of `task`: "" under language.drop,
        a paraphrase under language.paraphrase, None for the task's own."""
        if not cid:
            return None
        cond = perturb.condition(cid)
        if cond.get("language.drop"):
            return ""
        return perturb.instruction(cond, self.paraphrases, task, self.benchmark.task_description(task))

    def episode_start(self, unit: EpisodeUnit) -> EpisodeStart:
        given = self.instruction(unit.condition, unit.task)
        return EpisodeStart(
            task_group=unit.task_group,
            task=unit.task,
            description=self.benchmark.task_description(unit.task) if given is None else given,
            episode_index=unit.env_index,
            seed=unit.seed,
            condition=unit.condition,
        )

    def policy_name(self) -> str:
        cfg = self.policy_config
        return f"{cfg.type!r}" + (f" ({cfg.path})" if cfg.path else "")

    @cached_property
    def renames(self) -> dict[str, str]:
        return self.policy_config.renames()

    @cached_property
    def processors(self) -> tuple[Any, Any]:
        return self.benchmark.get_env_processors()

    def processors_for(self, policy: Policy) -> tuple[Any, Any]:
        """The benchmark's env processors, or the policy's own where it brings them (X-VLA)."""
        found = policy.env_processors(self.benchmark)
        return found if found is not None else self.processors

    def reset(self, policy: Policy, slots: Sequence[int], starts: Sequence[EpisodeStart]) -> None:
        """`policy.reset`, its errors named as `act`'s are: a PolicyError that stops the run.
        Each slot's condition (--eval.perturb) starts over with its episode (its native axes
        are the env's: `config.env.set_condition`)."""
        for slot, start in zip(slots, starts, strict=True):
            if start.condition and perturb.condition(start.condition).policy_side:
                self.perturbers[slot] = self._perturber(start)
            else:
                self.perturbers.pop(slot, None)
        try:
            policy.reset(list(slots), list(starts))
        except (PolicyError, EpisodesLost, ConfigError):
            raise
        except Exception as err:  # the policy's own bug: name it, keep the cause for --debug
            raise PolicyError(f"policy {self.policy_name()} raised {type(err).__name__} in reset: {err}") from err

    def _perturber(self, start: EpisodeStart) -> Perturber:
        cond = perturb.condition(start.condition)
        bounds = perturb.action_bounds(cond, self.action_space, self.benchmark.type_name)
        return Perturber(cond, start.seed, bounds, self.instruction(start.condition, start.task))

    def policy_batch(self, obs: Any, pre: Any, features: dict[str, Any] | None = None) -> dict[str, Any]:
        """Observations (as the env returned them, batched) as a policy sees them: LeRobot
        keys (`features`, when already made), the env pre-processor `pre` applied,
        `--rename_map`'s keys (`rollbench check` shows a checkpoint this batch)."""
        batch: dict[str, Any] = pre(self.benchmark.to_features(obs) if features is None else features)
        renames = self.renames
        if renames:  # --rename_map: the keys the policy was trained on
            batch = {renames.get(k, k): v for k, v in batch.items()}
        return batch

    def act(self, policy: Policy, obs: Any, slots: Sequence[int], prompts: Sequence[str]) -> np.ndarray:
        """Observations (as the env returned them, batched) -> validated env actions."""
        pre, post = self.processors_for(policy)  # built once: this runs every step
        features = self.benchmark.to_features(obs)
        perturbed = [(i, self.perturbers[s]) for i, s in enumerate(slots) if s in self.perturbers] if self.perturbers else []
        if perturbed:  # rows under a condition see what it makes of their observation
            seen = {k: np.array(v, copy=True) for k, v in features.items()}
            prompts = list(prompts)
            for i, p in perturbed:
                for key, value in p.inputs(take_row(features, i)).items():
                    seen[key][i] = value
                prompts[i] = p.prompt(prompts[i])
            batch = self.policy_batch(obs, pre, seen)
        else:
            batch = self.policy_batch(obs, pre, features)
        batch["task"] = list(prompts)
        try:
            watch = self._watch(policy)
            raw = policy.act(batch, slots)
        except (PolicyError, EpisodesLost, ConfigError):  # EpisodesLost: the scheduler runs those episodes again;
            raise  # ConfigError: a checkpoint that could not load (policies may load in the background)
        except Exception as err:  # the policy's own bug: name it, keep the cause for --debug
            raise PolicyError(f"policy {self.policy_name()} raised {type(err).__name__}: {err}") from err
        changed = watch.changed() if watch is not None else 0
        if changed and isinstance(policy, FreshWeights):  # its copies share the weights: deepcopy did not copy them
            raise PolicyError(
                f"policy {self.policy_name()} changed {changed} of its {len(watch or ())} parameter tensors of the policy "
                f"as built, although --policy.fresh_weights=true acts with copies: its deepcopy shares its weights"
            )
        if changed:
            raise PolicyError(
                f"policy {self.policy_name()} changed {changed} of its {len(watch or ())} parameter tensors since its "
                f"first call (it trains at test time): each episode's result would depend on the episodes before it, on "
                f"its batch-mates and on the worker count; pass --policy.fresh_weights=true to give every episode its "
                f"own copy of the weights"
            )
        actions = check_actions(post(np.asarray(raw)), len(slots), self.action_space, self.policy_name())
        if perturbed:
            actions = actions.copy()  # the policy may keep what it returned (a chunk's queue)
        for i, p in perturbed:  # the call stands: each row's step under its condition is taken
            actions[i] = p.outputs(actions[i])
            p.advance(take_row(features, i))
        self.counts.add(1, len(slots))
        timeline.mark("first_env_step")  # every mode steps its envs with these next
        return actions


def play_episode(
    ctx: StepContext, policy: Policy, env: Any, unit: EpisodeUnit, slot: int = 0, worker: str = "main",
    record_mode: RecordRule | None = None,
) -> EpisodeRecord:
    """One whole episode of `unit` in one env, the policy acting on one row: reset into the
    unit, then act, step and track until it ends. The env's and policy's errors propagate
    (a policy's as PolicyError); the caller decides whether a unit is tried again."""
    tracker = EpisodeTracker.of(ctx.benchmark, unit, record_mode)
    obs = tracker.reset(ctx.benchmark, env)
    ctx.reset(policy, [slot], [ctx.episode_start(unit)])
    prompt = [ctx.benchmark.policy_task(unit.task)]
    ended = False
    while not ended:
        action = ctx.act(policy, stack_any([obs]), [slot], prompt)[0]
        obs, ended = tracker.step(ctx.benchmark, env, obs, action)
    return tracker.record(worker)


def stack_any(obs_list: Sequence[Any]) -> Any:
    """Stack observations with no flat layout (pickled path): dicts key by key."""
    first = obs_list[0]
    if isinstance(first, Mapping):
        return {k: stack_any([o[k] for o in obs_list]) for k in first}
    return np.stack([np.asarray(o) for o in obs_list])


def take_rows(batch: Any, rows: Sequence[int]) -> Any:
    """Rows `rows` of a batched observation (arrays, or dicts of them)."""
    if isinstance(batch, dict):
        return {k: take_rows(v, rows) for k, v in batch.items()}
    return np.asarray(batch)[np.asarray(rows, dtype=np.intp)]


def act_surviving(
    ctx: StepContext, policy: Policy, batch: Any, slots: Sequence[int], prompts: Sequence[str],
) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """({row: action}, {row: why}): actions for the rows whose episodes the policy still
    has; rows it lost (`EpisodesLost`) are named with the reason, and the call is made
    again without them."""
    rows = list(range(len(slots)))
    lost: dict[int, str] = {}
    while rows:
        part = batch if len(rows) == len(slots) else take_rows(batch, rows)
        try:
            out = ctx.act(policy, part, [slots[r] for r in rows], [prompts[r] for r in rows])
        except EpisodesLost as err:
            gone = {r for r in rows if slots[r] in err.slots}
            if not gone:
                raise PolicyError(f"policy {ctx.policy_name()} lost episodes of slots it was not asked about: {err}") from None
            lost.update({r: str(err) for r in gone})
            rows = [r for r in rows if r not in gone]
            continue
        return dict(zip(rows, out, strict=True)), lost
    return {}, lost
