"""The whole configuration of one `rollbench eval` run."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Literal

from rollbench.config.env import BenchmarkConfig
from rollbench.config.eval import EvalConfig
from rollbench.config.fields import opt, to_dict
from rollbench.config.policy import PolicyConfig
from rollbench.config.ray import RayConfig
from rollbench.config.tune import TuneConfig
from rollbench.errors import ConfigError

#: the largest seed an episode may have: numpy's legacy RandomState (robosuite under LIBERO,
#: gym.Env.np_random's callers) takes 0..2**32-1, and gymnasium refuses negative seeds
MAX_SEED = 2**32 - 1
#: --policy.* options never written anywhere (a policy server's key)
SECRET_OPTIONS = ("api_key",)
#: --policy.* options that say how to reach a policy, not which one: not part of a run's
#: identity, so a rerun with a longer timeout resumes (the server's address stays in it)
TRANSPORT_OPTIONS = ("timeout_s", "connect_retries")


@dataclass(frozen=True)
class RunConfig:
    env: BenchmarkConfig
    policy: PolicyConfig
    eval: EvalConfig
    tune: TuneConfig = dataclasses.field(default_factory=TuneConfig)
    ray: RayConfig = dataclasses.field(default_factory=RayConfig)
    seed: int = opt(1000, "episode i of every task gets seed `seed + i`")
    seeds: tuple[int, ...] = opt(
        (), "several seeds in one run (e.g. 1000,2000,3000): every task runs --eval.n_episodes per seed, episode i "
        "of seed s with seed s + i, as one lerobot-eval run per --seed would; results per seed and pooled",
    )
    output_dir: str = opt("", "where results go (default outputs/eval/<date>/<time>_<job_name or env_policy>)")
    job_name: str = opt("", "a name for the run (lerobot-eval's --job_name): in the default --output_dir and in run.json")
    resume: bool = opt(True, "continue the run already in output_dir (false: start over)")
    workers: int | Literal["auto"] | None = opt(
        None, "continuous mode: env worker processes (default: CPU cores); auto: measure the machine "
        "as `rollbench tune` does and use its recommendation (workers, slots, batch bound, render device)"
    )
    slots_per_worker: int | None = opt(None, "continuous mode: env slots per worker (default: from step cost)")
    render_device: Literal["auto", "gpu", "cpu"] = opt(
        "auto", "MuJoCo rendering: gpu=EGL, cpu=OSMesa, auto=EGL when a GPU is visible"
    )
    executor: str = opt(
        "local", "where units run: local (this process); shards (--eval.num_shards processes on this machine, "
        "merged; was --launch=local); ray (actors on a Ray cluster, --ray.*; needs `pip install 'rollbench[ray]'`); "
        "or a plugin's executor (`rollbench list`)"
    )
    #: --executor.<field>: a plugin executor's own flags (its `options_class`), checked by the executor
    executor_options: dict[str, str] = dataclasses.field(default_factory=dict, metadata={"help": "other --executor.<field> flags"})
    trust_remote_code: bool = opt(
        False, "allow benchmarks that import code you name (--env.type=hub); it runs with your permissions"
    )
    debug: bool = opt(False, "print tracebacks for errors")

    def __post_init__(self) -> None:
        self._check_seeds()
        if isinstance(self.workers, int) and self.workers < 1:
            raise ConfigError(f"--workers={self.workers} is not allowed; it must be >= 1")
        if self.slots_per_worker is not None and self.slots_per_worker < 1:
            raise ConfigError(f"--slots_per_worker={self.slots_per_worker} is not allowed; it must be >= 1")
        self._check_executor_flags()
        if type(self.env).runs_user_code and not self.trust_remote_code:
            raise ConfigError(
                f"--env.type={self.env.type_name} imports and runs the code at the path you give; "
                f"read it, then pass --trust_remote_code=true to allow it"
            )

    def _check_executor_flags(self) -> None:
        """An executor's flags without that executor would be ignored, which a user would take as applied."""
        if self.executor != "ray":
            given = next((f for f in dataclasses.fields(RayConfig) if getattr(self.ray, f.name) != f.default), None)
            if given is not None:
                raise ConfigError(f"--ray.{given.name}={getattr(self.ray, given.name)} is an option of --executor=ray, "
                                  f"and this run's executor is {self.executor}; add --executor=ray or drop the flag")
            return
        for name, ray_flag in (("workers", "--ray.actors"), ("slots_per_worker", "--ray.slots_per_actor")):
            value = getattr(self, name)
            if isinstance(value, int):
                raise ConfigError(f"--{name}={value} sets this machine's worker processes, which --executor=ray does not "
                                  f"start; give {ray_flag} instead")

    def _check_seeds(self) -> None:
        seeds, n = self.seeds, self.eval.n_episodes
        for s in seeds or (self.seed,):
            if not 0 <= s <= MAX_SEED - (n - 1):
                flag = f"--seeds={','.join(map(str, seeds))}" if seeds else f"--seed={self.seed}"
                raise ConfigError(
                    f"{flag} is not allowed: seed {s} gives episodes the seeds {s}..{s + n - 1} "
                    f"(--eval.n_episodes={n}), and envs take seeds 0..{MAX_SEED} (numpy's); give seeds "
                    f"0..{MAX_SEED - (n - 1)}"
                )
        if not seeds:
            return
        flag = f"--seeds={','.join(map(str, seeds))}"
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"{flag} is not allowed; the seeds must differ")
        if self.seed != 1000 and self.seed != seeds[0]:
            raise ConfigError(f"--seed={self.seed} with {flag} is not allowed; give one of the two")
        object.__setattr__(self, "seed", seeds[0])  # the first seed is the run's --seed (one seed: the same run)
        ordered = sorted(seeds)
        for lo, hi in itertools.pairwise(ordered):
            if hi < lo + n:
                raise ConfigError(
                    f"{flag} is not allowed with --eval.n_episodes={n}: seed {lo} runs seeds {lo}..{lo + n - 1}, "
                    f"which overlaps seed {hi}'s; space the seeds at least {n} apart"
                )
        if len(seeds) > 1 and self.policy.seeding == "lerobot-eval":
            raise ConfigError(
                f"{flag} with --policy.seeding=lerobot-eval is not allowed: that seeding reproduces one lerobot-eval "
                f"run (one --seed); run one rollbench eval per seed"
            )

    def to_dict(self) -> dict[str, Any]:
        """Everything that shaped the run (written to run.json and eval_info.json), secrets hidden."""
        data = to_dict(self)
        options = data["policy"].get("options") or {}
        for key in SECRET_OPTIONS:
            if key in options:
                options[key] = "<redacted>"
        return data

    def identity(self) -> dict[str, Any]:
        """What decides per-episode results: two runs with equal identities may share a log."""
        policy = to_dict(self.policy)
        options = dict(policy.get("options") or {})
        for key in (*SECRET_OPTIONS, *TRANSPORT_OPTIONS):
            options.pop(key, None)
        policy["options"] = options
        # where and how many per call, not what; a hub revision is what its commit is; a LeRobot
        # type named on the command line is checked against the checkpoint, which it then is
        for key in ("placement", "max_batch_size", "revision", "lerobot_type"):
            policy.pop(key, None)
        if not policy.get("fresh_weights"):  # off: as runs logged before the flag existed say it
            policy.pop("fresh_weights", None)
        return {
            "env": to_dict(self.env),
            "policy": policy,
            "seed": self.seed,
            **({"seeds": list(self.seeds)} if len(self.seeds) > 1 else {}),
            "n_episodes": self.eval.n_episodes,
            # a sweep's conditions decide which episode index is which condition's episode
            **({"conditions": list(self.eval.conditions)} if self.eval.is_sweep else {}),
            # crossed conditions draw each axis's noise apart since issue 46 (common random numbers):
            # a run logged before with the old joint draws is another run, not one to resume
            **({"draws": "per_axis"} if any("&" in c for c in self.eval.conditions) else {}),
            **({"paraphrases": self.eval.paraphrases} if "language.paraphrase=" in self.eval.perturb else {}),
        }
