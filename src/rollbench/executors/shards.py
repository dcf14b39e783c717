"""Local shard launcher: `--executor=shards --eval.num_shards=N` (`--launch=local` before).

The parent writes `run.json` first (so every child agrees on the run, and `--resume=false`
is applied once, not by each child), then starts N children

    python -m rollbench eval <same flags> --eval.shard_id=K --executor=local

into the same output_dir, each with what this process decided for it once
(`scheduler.decide.overrides`: render backend, GPU, its share of the cores, --workers=auto's
recommendation) in `logs/shard-K.override.json`, which its `decide` uses as is; the user's
own flags stay on its command line. Each child resumes on its own from the episode logs, writes its
own `episodes/<writer>.jsonl`, and sends its stdout/stderr to `logs/shard-K.log`. The
parent only watches: it tails the episode logs for one combined progress line and stops
the children on Ctrl-C. Opening and closing the run (run.json, the final merge into
`eval_info.json`) are the lifecycle's, as for every other executor, and happen once, here:
a child (`CHILD_ENV` in its environment, asked once, by `LocalExecutor.for_run`, which makes it
a `ShardChild`) only runs and logs its shard, and leaves what it decided and counted in
`logs/shard-K.json` for this process's eval_info.json.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rollbench.config.codec import CHILD_FLAGS, to_argv, without
from rollbench.config.run import RunConfig
from rollbench.episode.context import PolicyCalls
from rollbench.errors import ConfigError
from rollbench.executors.base import Executor, Run, Writes
from rollbench.plan import EpisodeUnit, shard
from rollbench.results.eval_info import ExecutionFacts
from rollbench.results.log import LogTail
from rollbench.results.merge import Merged
from rollbench.results.records import EpisodeRecord
from rollbench.results.sink import Logged, RecordSink
from rollbench.results.store import write_json_atomic
from rollbench.scheduler.decide import Override, Recommended, overrides

log = logging.getLogger(__name__)

LOGS_DIR = "logs"
#: set in each child's environment (to the launcher's pid): the child runs and logs its shard,
#: writes what it decided to `logs/shard-K.json`, and leaves closing the run to the launcher
CHILD_ENV = "ROLLBENCH_LAUNCHED_BY"
POLL_S = 1.0
STOP_GRACE_S = 10.0
TAIL_LINES = 15


def child_env(base: dict[str, str], over: Override) -> dict[str, str]:
    """The child's environment: what must be set before it imports anything (the backend binds
    PyOpenGL at its first import; a GPU is chosen by what CUDA sees)."""
    env = dict(base)
    env[CHILD_ENV] = str(os.getpid())
    # N processes each with a full BLAS/OpenMP thread pool oversubscribe the cores
    env["OMP_NUM_THREADS"] = "1"
    env["MUJOCO_GL"] = env["PYOPENGL_PLATFORM"] = over.gl_backend
    if over.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = env["MUJOCO_EGL_DEVICE_ID"] = str(over.gpu)
    return env


def launched_by() -> int | None:
    """The pid of the shards executor's launcher whose child this process is (which closes the
    run), or None: not a launched child."""
    parent = os.environ.get(CHILD_ENV, "")
    return int(parent) if parent.isdigit() else None


def shard_facts(output_dir: str | Path, shard_id: int) -> Path:
    return Path(output_dir) / LOGS_DIR / f"shard-{shard_id}.json"


def write_shard_facts(output_dir: str | Path, shard_id: int, facts: dict[str, Any]) -> None:
    write_json_atomic(shard_facts(output_dir, shard_id), facts)


def read_shard_facts(output_dir: str | Path, shard_id: int) -> dict[str, Any] | None:
    """A child's facts, or None if it wrote none (it failed before the end of its shard)."""
    try:
        data = json.loads(shard_facts(output_dir, shard_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def override_path(output_dir: str | Path, shard_id: int) -> Path:
    return Path(output_dir) / LOGS_DIR / f"shard-{shard_id}.override.json"


def read_override(cfg: RunConfig) -> Override | None:
    """In a launched child: what its launcher decided for it (None: a launcher that wrote none)."""
    path = override_path(cfg.output_dir, cfg.eval.shard_id)
    return Override.from_dict(json.loads(path.read_text())) if path.exists() else None


# -- commands ---------------------------------------------------------------------------


def user_flags(flags: dict[str, str], cfg: RunConfig) -> list[str]:
    """The user's flags minus those the launcher sets, plus the resolved output_dir."""
    out = to_argv(without(flags, CHILD_FLAGS))
    if cfg.policy.commit and "policy.commit" not in flags:  # a hub checkpoint: found in the cache by it
        out.append(f"--policy.commit={cfg.policy.commit}")
    return [*out, f"--output_dir={cfg.output_dir}"]


def child_argv(flags: dict[str, str], cfg: RunConfig, shard_id: int) -> list[str]:
    # resume=true: the parent already applied --resume=false once, in prepare()
    return [sys.executable, "-m", "rollbench", "eval", *user_flags(flags, cfg),
            f"--eval.shard_id={shard_id}", "--executor=local", "--resume=true"]


def rerun_command(flags: dict[str, str], cfg: RunConfig, shard_id: int) -> str:
    return shlex.join(["rollbench", "eval", *user_flags(flags, cfg), f"--eval.shard_id={shard_id}"])


def resume_command(flags: dict[str, str], cfg: RunConfig) -> str:
    return shlex.join(["rollbench", "eval", *user_flags(flags, cfg), "--executor=shards"])


def _die_with_parent() -> None:
    """Linux: a child gets SIGTERM when the launcher dies, so no orphan keeps writing."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- watching ---------------------------------------------------------------------------


@dataclass
class Shard:
    shard_id: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_fh: IO[bytes]
    rc: int | None = None

    def describe_rc(self) -> str:
        if self.rc is not None and self.rc < 0:
            try:
                return f"killed by {signal.Signals(-self.rc).name}"
            except ValueError:
                return f"killed by signal {-self.rc}"
        return f"exit code {self.rc}"


def indented_tail(path: Path, n: int = TAIL_LINES) -> str:
    """The last `n` lines of a shard's log, indented for an error message (or why there are none)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        return f"(cannot read {path}: {err.strerror})"
    return "\n".join(f"    {line}" for line in lines[-n:]) or "    (empty)"


def stop(shards: Sequence[Shard]) -> None:
    """SIGINT first (children save and exit 130), SIGKILL for what still runs after a grace."""
    for s in shards:
        if s.proc.poll() is None:
            with contextlib.suppress(OSError):
                s.proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for s in shards:
        try:
            s.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
        s.rc = s.proc.returncode


# -- the launcher -----------------------------------------------------------------------


def _tune_shards(cfg: RunConfig) -> Recommended:
    """`--workers=auto` under the launcher: probe once here (children probing at the same
    time would measure each other), then size one shard with its share of the cores."""
    from rollbench import tune  # lazy: --workers=auto only; lifecycle (so `rollbench merge`) imports this module

    log.info("--workers=auto: measuring this machine once for all %d shards (up to %.0fs)", cfg.eval.num_shards, cfg.tune.budget_s)
    probe = tune.measure(dataclasses.replace(cfg, workers=None))
    share = max(1, int(probe.machine.cores.v) // cfg.eval.num_shards)
    machine = dataclasses.replace(probe.machine, cores=dataclasses.replace(probe.machine.cores, value=float(share)))
    rec = tune.recommend(dataclasses.replace(probe, machine=machine))
    log.info("--workers=auto: each shard gets %s", " ".join(tune.recommended_flags(rec)))
    return rec


class LocalShardsExecutor(Executor):
    """`--executor=shards`: N `rollbench eval --eval.shard_id=K` children into one directory;
    this process watches."""

    logs_itself = True  # every child appends to its own episode log

    @classmethod
    def for_run(cls, cfg: RunConfig, flags: Mapping[str, str]) -> Executor:
        return cls(dict(flags))  # the children's command lines are the user's flags, as typed

    def __init__(self, flags: dict[str, str]) -> None:
        self.flags = flags
        self.cfg: RunConfig | None = None
        self.shards: list[Shard] = []
        self.overrides: list[Override] = []  # what each child runs with, decided here once
        self.logtail: LogTail | None = None

    def share(self, cfg: RunConfig, plan: list[EpisodeUnit]) -> list[EpisodeUnit]:
        return plan  # every shard, one child each

    def writes(self, cfg: RunConfig) -> Writes:
        return Writes(None)  # every shard, through its children

    def setup(self, cfg: RunConfig) -> None:
        if cfg.eval.shard_id != 0:
            raise ConfigError(
                f"--eval.shard_id={cfg.eval.shard_id} is not allowed with --executor=shards, which starts "
                f"every shard itself; drop --eval.shard_id (or run one shard with --executor=local)"
            )
        self.cfg = cfg

    def start(self, run: Run) -> None:
        cfg = run.cfg
        self.overrides = overrides(cfg, _tune_shards(cfg) if cfg.workers == "auto" else None)
        (run.output_dir / LOGS_DIR).mkdir(exist_ok=True)
        self.logtail = LogTail(run.output_dir)
        self.logtail.skip_existing()

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        cfg = run.cfg
        assert self.logtail is not None
        logtail = self.logtail
        seen = set(run.done_before)
        planned = {u.key for u in run.plan}

        def new(records: list[EpisodeRecord]) -> Iterator[EpisodeRecord]:
            for rec in records:
                if rec.key in planned and rec.key not in seen and rec.ok:
                    seen.add(rec.key)
                    yield rec

        for over in self.overrides:
            k = over.shard_id
            shard_facts(run.output_dir, k).unlink(missing_ok=True)  # an earlier launch's
            write_json_atomic(override_path(run.output_dir, k), dataclasses.asdict(over))
            argv = child_argv(self.flags, cfg, k)
            log_path = run.output_dir / LOGS_DIR / f"shard-{k}.log"
            fh = open(log_path, "ab")  # noqa: SIM115 (closed in close())
            fh.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n"
                     f"=== {override_path(run.output_dir, k)}: {json.dumps(dataclasses.asdict(over))}\n".encode())
            fh.flush()
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=child_env(dict(os.environ), over),
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            self.shards.append(Shard(k, proc, log_path, fh))
        on_gpus = [o.gpu for o in self.overrides if o.gpu is not None]
        log.info(
            "started %d shard processes (MUJOCO_GL=%s%s); logs in %s",
            cfg.eval.num_shards, self.overrides[0].gl_backend, f", GPUs {on_gpus}" if on_gpus else "",
            run.output_dir / LOGS_DIR,
        )
        while any(s.proc.poll() is None for s in self.shards):
            time.sleep(POLL_S)
            yield from new(logtail.new_records())
        for s in self.shards:
            s.rc = s.proc.returncode
        yield from new(logtail.new_records())

    def sink(self, run: Run) -> RecordSink:
        return Logged()  # each child appended its records to its own log

    def stop(self) -> None:
        stop(self.shards)

    def resume_hint(self) -> str:
        assert self.cfg is not None
        return f"to resume, run the same command again: {resume_command(self.flags, self.cfg)}"

    def facts(self) -> ExecutionFacts:
        """The launch, and what each child decided and counted (its `logs/shard-K.json`):
        `scheduling` is the children's Schedule when they all ran the same one (else null, and
        each shard's is under `executor.shards`)."""
        assert self.cfg is not None
        children = [read_shard_facts(self.cfg.output_dir, s.shard_id) or {} for s in self.shards]
        schedules = [child.get("scheduling") for child in children]
        same = schedules[0] if schedules and all(x is not None and x == schedules[0] for x in schedules) else None
        calls = PolicyCalls.total(*(child.get("policy_calls") for child in children))
        return ExecutionFacts("shards", scheduling=same, policy_calls=calls, detail={
            "num_shards": self.cfg.eval.num_shards,
            "mujoco_gl": self.overrides[0].gl_backend if self.overrides else "",
            "shards": [
                {"shard_id": s.shard_id, "returncode": s.rc, "log": str(s.log_path), "gpu": over.gpu,
                 "scheduling": schedule}
                for s, over, schedule in zip(self.shards, self.overrides, schedules, strict=False)
            ],
        })

    def describe(self) -> str:
        assert self.cfg is not None
        return f"in {self.cfg.eval.num_shards} shard processes"

    def finish(self, run: Run, merged: Merged) -> list[str]:
        """A shard failed when its own units are not all done; its exit code alone may also
        reflect other shards' failures already in the shared log."""
        cfg, n = run.cfg, run.cfg.eval.num_shards
        done = merged.done_keys()
        counted = {u.key for u in merged.plan}  # an adaptive run: the units before each task's stop
        short = {k: sum(u.key not in done and u.key in counted for u in shard(run.plan, k, n)) for k in range(n)}
        rerun = [s for s in self.shards if short[s.shard_id]]
        problems = [
            f"shard {s.shard_id} failed ({s.describe_rc()}; {short[s.shard_id]} of its episodes missing or failed); "
            f"last lines of {s.log_path}:\n{indented_tail(s.log_path)}"
            for s in rerun
        ]
        problems += [
            f"shard {s.shard_id} ended with {s.describe_rc()} although all its episodes are logged; see {s.log_path}"
            for s in self.shards if s.rc != 0 and not short[s.shard_id]
        ]
        if rerun:
            commands = "\n".join(f"  {rerun_command(self.flags, cfg, s.shard_id)}" for s in rerun)
            problems.append(
                f"failed shards: {', '.join(str(s.shard_id) for s in rerun)}. Rerun just those (finished episodes are "
                f"kept), then merge:\n{commands}\n  {shlex.join(['rollbench', 'merge', str(run.output_dir)])}"
            )
        return problems

    def close(self) -> None:
        for s in self.shards:
            s.log_fh.close()


class ShardChild(Executor):
    """One shard of an `--executor=shards` launcher, run by the executor `inner` (the local one):
    it logs its records as every run does (its sink is its own episode log) and does not
    close the run: what it decided and counted goes to `logs/shard-K.json` (`hand_over`),
    and its launcher closes once, with every child's facts."""

    closes = False

    def __init__(self, inner: Executor, launcher: int) -> None:
        self.inner = inner
        self.launcher = launcher  # its pid

    def share(self, cfg: RunConfig, plan: list[EpisodeUnit]) -> list[EpisodeUnit]:
        return self.inner.share(cfg, plan)

    def writes(self, cfg: RunConfig) -> Writes:
        return dataclasses.replace(self.inner.writes(cfg), launched_by=self.launcher)

    def setup(self, cfg: RunConfig) -> None:
        self.inner.setup(cfg)

    def start(self, run: Run) -> None:
        self.inner.start(run)

    def execute(self, run: Run) -> Iterator[EpisodeRecord]:
        return self.inner.execute(run)

    def sink(self, run: Run) -> RecordSink:
        return self.inner.sink(run)

    def facts(self) -> ExecutionFacts:
        return self.inner.facts()

    def describe(self) -> str:
        return self.inner.describe()

    def stop(self) -> None:
        self.inner.stop()

    def resume_hint(self) -> str:
        return self.inner.resume_hint()

    def hand_over(self, run: Run, ran: int) -> None:
        facts = self.inner.facts()
        shard_id = run.cfg.eval.shard_id
        write_shard_facts(run.output_dir, shard_id, {
            "shard_id": shard_id, "ran": ran, "scheduling": facts.scheduling,
            "policy_calls": facts.policy_calls, "startup": facts.startup, "tune": facts.tune,
        })

    def close(self) -> None:
        self.inner.close()
