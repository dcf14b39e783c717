"""Which policy to evaluate and where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rollbench.config.fields import opt
from rollbench.errors import ConfigError
from rollbench.registry import Registry

#: `--policy.type` -> its adapter (policies/), beside the config as BENCHMARKS is: the flags are
#: read without importing an adapter, and a built-in one is imported only when named
POLICIES: Registry[Any] = Registry("policy type", "rollbench.policies")
for _name, _target in {
    "expert": "rollbench.policies.expert:ExpertPolicy",
    "random": "rollbench.policies.random:RandomPolicy",
    "module": "rollbench.policies.module:load_module_policy",
    "object": "rollbench.policies.module:handed_policy",
    "lerobot": "rollbench.policies.lerobot:LeRobotPolicy",
    "remote": "rollbench.policies.remote:RemotePolicy",
}.items():
    POLICIES.add_lazy(_name, _target)


@dataclass(frozen=True)
class PolicyConfig:
    type: str = opt("", "policy type (see `rollbench list`); a LeRobot checkpoint dir in --policy.path implies lerobot")
    path: str | None = opt(
        None, "module policy: pkg.mod:factory; lerobot: checkpoint directory, or a hub id ORG/NAME (downloaded "
        "once into the Hugging Face cache; HF_HUB_OFFLINE=1 uses the cache only)"
    )
    revision: str | None = opt(None, "lerobot, hub id: the branch, tag or commit to evaluate (default main)")
    commit: str | None = opt(
        None, "lerobot, hub id: the commit the revision resolved to; rollbench fills it in and records it "
        "(part of a run's identity), a resume or shard finds the checkpoint by it"
    )
    lerobot_type: str | None = opt(
        None, "lerobot: the policy type the checkpoint must have (its config.json's `type`); "
        "--policy.type=act (a LeRobot or plugin type) with --policy.path=DIR sets it to act"
    )
    device: str = opt("cpu", "device for torch policies: cpu, cuda, cuda:N, mps")
    use_amp: bool = opt(False, "run torch policies under autocast")
    placement: Literal["auto", "worker", "driver"] = opt(
        "auto",
        "worker: cheap CPU policies run inside each env worker (no round trip per step); "
        "driver: one batched policy in the main process; auto: worker when the policy is cheap",
    )
    max_batch_size: int | None = opt(
        None,
        "continuous mode, driver placement: at most this many observations per policy call (e.g. to fit "
        "GPU memory); a larger batch of ready slots is split into several calls. Default: no bound",
    )
    seeding: Literal["episode", "lerobot-eval"] = opt(
        "episode",
        "lerobot, sampling policies (Diffusion, flow matching): where their noise comes from. episode: from each "
        "episode's seed (the same episode whatever the batch, workers, shards or resume); lerobot-eval: torch's "
        "global RNG seeded once with --seed before the checkpoint loads, as lerobot-eval does (lockstep; the same "
        "draws as lerobot-eval at the same --eval.batch_size, for a run done in one go)",
    )
    fresh_weights: bool = opt(
        False,
        "for policies that train at test time (change their weights inside act): every episode acts with its own "
        "copy of the policy as it was built, one row per call, so no episode sees what another taught it. Without "
        "it such a policy is refused at its first change",
    )
    rename_map: str = opt(
        "",
        "observation keys renamed before the policy sees them, as JSON {\"env key\": \"policy key\"} "
        "(lerobot-eval's --rename_map, also accepted without the policy. prefix)",
    )
    #: other --policy.<field>=value flags, passed to the adapter (e.g. n_action_steps)
    options: dict[str, str] = field(default_factory=dict, metadata={"help": "other --policy.<field> flags"})

    def __post_init__(self) -> None:
        if not self.type:
            raise ConfigError("--policy.type is required (e.g. expert, random, module); see `rollbench list`")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ConfigError(f"--policy.max_batch_size={self.max_batch_size} is not allowed; it must be >= 1")
        if self.seeding != "episode" and self.type != "lerobot":
            raise ConfigError(f"--policy.seeding={self.seeding} is for LeRobot checkpoints (--policy.type=lerobot), "
                              f"not --policy.type={self.type}")
        if self.fresh_weights and self.seeding == "lerobot-eval":
            raise ConfigError("--policy.fresh_weights=true calls each episode's own copy one row at a time, which cannot "
                              "draw lerobot-eval's batch-shaped noise (--policy.seeding=lerobot-eval); use "
                              "--policy.seeding=episode with it")
        if self.fresh_weights and self.type == "remote":
            raise ConfigError("--policy.fresh_weights=true copies the policy's weights, which a --policy.type=remote "
                              "policy keeps in its server; give each episode fresh weights there")
        if self.lerobot_type and self.type != "lerobot":
            raise ConfigError(f"--policy.lerobot_type={self.lerobot_type} is for LeRobot checkpoints (--policy.type=lerobot), "
                              f"not --policy.type={self.type}")
        self.renames()  # checked before anything runs

    def renames(self) -> dict[str, str]:
        """--rename_map as a dict (empty when not given)."""
        if not self.rename_map:
            return {}
        import json  # lazy: `rollbench --help` does not load json (start-up time)

        try:
            data = json.loads(self.rename_map)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--rename_map={self.rename_map!r} is not JSON ({err.msg}); give e.g. "
                              f"'{{\"observation.images.top\": \"observation.images.front\"}}'") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise ConfigError(f"--rename_map={self.rename_map!r} must be a JSON object of strings "
                              f"{{\"env key\": \"policy key\"}}")
        return data
