"""Where `--executor=ray` runs: the cluster and the actors on it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rollbench.config.fields import opt
from rollbench.errors import ConfigError

#: what --ray.address takes besides auto: [ray://]HOST:PORT, HOST a name, an IPv4 or a bracketed IPv6 address
ADDRESS = re.compile(r"(ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True)
class RayConfig:
    address: str = opt(
        "", "a Ray cluster to join (auto: the one `ray start` runs here; HOST:PORT); empty: start a local "
        "instance for this run and shut it down after"
    )
    connect_timeout_s: float = opt(
        30.0, "how long to wait for the cluster at --ray.address to answer before giving up in one line "
        "(ray.init itself retries forever)"
    )
    actors: int | None = opt(None, "rollout actors (default: the cluster's CPUs / --ray.cpus_per_actor, at most one per unit)")
    cpus_per_actor: float = opt(1.0, "CPUs reserved per actor (each steps its slots and runs the policy in one process)")
    gpus_per_actor: float = opt(0.0, "GPUs reserved per actor; fractions share a GPU (e.g. 0.25: four actors per GPU)")
    slots_per_actor: int | None = opt(
        None, "env slots per actor (default: 1 for cheap CPU policies, else enough rows per policy call to batch)"
    )
    queue_per_slot: int = opt(
        1, "episodes queued on each actor slot behind its running one while many are left (a slot never waits a "
        "round trip for its next episode)"
    )
    units_per_call: int | None = opt(None, "removed: actors take episodes slot by slot; use --ray.queue_per_slot")
    upload_videos: Literal["auto", "true", "false"] = opt(
        "auto", "send each video back to the driver, which writes it under --output_dir (auto: from actors on "
        "another host than the driver's; false: videos stay where the actor wrote them, e.g. a shared filesystem)"
    )

    def __post_init__(self) -> None:
        self._check_address()
        if not self.connect_timeout_s > 0:
            raise ConfigError(f"--ray.connect_timeout_s={self.connect_timeout_s} is not allowed; it must be > 0")
        if self.actors is not None and self.actors < 1:
            raise ConfigError(f"--ray.actors={self.actors} is not allowed; it must be >= 1")
        if not self.cpus_per_actor > 0:
            raise ConfigError(f"--ray.cpus_per_actor={self.cpus_per_actor} is not allowed; it must be > 0")
        if self.gpus_per_actor < 0:
            raise ConfigError(f"--ray.gpus_per_actor={self.gpus_per_actor} is not allowed; it must be >= 0")
        if self.slots_per_actor is not None and self.slots_per_actor < 1:
            raise ConfigError(f"--ray.slots_per_actor={self.slots_per_actor} is not allowed; it must be >= 1")
        if self.queue_per_slot < 0:
            raise ConfigError(f"--ray.queue_per_slot={self.queue_per_slot} is not allowed; it must be >= 0")
        if self.units_per_call is not None:
            raise ConfigError(
                f"--ray.units_per_call={self.units_per_call}: the flag is gone; Ray actors now take episodes slot by "
                f"slot, as local workers do: use --ray.queue_per_slot (episodes queued behind each slot's running one)"
            )

    def _check_address(self) -> None:
        """The form of --ray.address, when the flags are read (Ray's own check comes after the
        policy is built, as `ValueError: Invalid address format`)."""
        found = ADDRESS.fullmatch(self.address)
        if not self.address or self.address == "auto" or (found and 0 < int(found["port"]) < 65536):
            return
        raise ConfigError(
            f"--ray.address={self.address!r} is not allowed; give HOST:PORT of the cluster's head (e.g. 10.0.0.5:6379, "
            f"the address `ray start --head` printed; ray://HOST:10001 for Ray Client), auto (the cluster `ray start` "
            f"runs on this machine), or leave it empty (a local instance for this run)"
        )
