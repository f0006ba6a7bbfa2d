"""A worker process for the tests: lease from a queue until it stays empty, run each task
(optionally failing the first attempt of every task), and print what it did, one JSON line
per task. ``python -m tests.integration.scheduler.worker BASE KEY QUEUE NAME [--fail-first]``
"""

from __future__ import annotations

import sys

import orjson

from ingest.client import CausewayClient


def main(base: str, key: str, queue: str, name: str, *, fail_first: bool) -> None:
    with CausewayClient(base, key) as client:
        while (lease := client.lease(queue, name, wait_s=1.5, lease_s=30)) is not None:
            if fail_first and lease.task["attempts"] == 1:
                client.fail(lease, "transient", f"{name} is warming up")
                outcome = "failed"
            else:
                result = {
                    "specversion": "1.0",
                    "id": f"result-{lease.task_id}",
                    "source": f"/workers/{name}",
                    "type": "job.done",
                    "data": {"input": lease.trigger["data"], "worker": name},
                }
                client.complete(lease, [result])
                outcome = "completed"
            line = {"task": lease.task_id, "attempt": lease.task["attempts"], "outcome": outcome}
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:5], fail_first="--fail-first" in sys.argv[5:])
