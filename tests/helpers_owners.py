"""What the processes of tests/test_owners.py run: light imports only (a child process imports this
module, not the test module, whose conftest imports torch)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rollbench.errors import ConfigError
from rollbench.results import owners, store


def writer(identity: dict[str, Any], **kw: Any) -> owners.Writer:
    fields: dict[str, Any] = dict(host=owners.host(), pid=os.getpid(), identity=identity, shard_id=None, num_shards=1,
                                  launched_by=None, resume=True, started=time.time())
    fields.update(kw)
    return owners.Writer(**fields)


def claim_after(barrier: Any, out: str, noise: float, results: Any) -> None:
    barrier.wait()
    try:
        _, claim = store.prepare(Path(out), {"noise": noise}, writer({"noise": noise}))
    except ConfigError as err:
        results.put((os.getpid(), str(err)))
        return
    results.put((os.getpid(), None))
    time.sleep(1.0)  # still running when the others look
    claim.release()


def claim_and_wait(out: str, ready: Any) -> None:
    _, claim = store.prepare(Path(out), {}, writer({"x": 1}))
    ready.set()
    time.sleep(600)
    claim.release()
