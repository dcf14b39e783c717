"""Where units run: the executors, by the name `--executor` takes.

    local   this process drives a scheduler
    shards  `--eval.num_shards` shard processes on this machine (each a `local` run of its shard), merged
    ray     actors on a Ray cluster (`--ray.*`)

A third-party executor registers itself (`@EXECUTORS.register("name")` in a module named in
$ROLLBENCH_PLUGINS, or an entry point in the `rollbench.executors` group); docs/adding_an_executor.md
shows one. Nothing here imports an executor's module before it is used.
"""

from __future__ import annotations

from typing import Any

from rollbench.registry import Registry

EXECUTORS: Registry[Any] = Registry("executor", "rollbench.executors")
for _name, _target in {
    "local": "rollbench.executors.local:LocalExecutor",
    "shards": "rollbench.executors.shards:LocalShardsExecutor",
    "ray": "rollbench.executors.ray:RayExecutor",
}.items():
    EXECUTORS.add_lazy(_name, _target)
