"""How many provider calls the deployment runs at once: the sum over the worker processes
polling the LLM task queue of each one's ``TURNGATE_LLM_CONCURRENCY``.

Each worker names its limit in the identity of its LLM poller (:func:`llm_worker_identity`);
Temporal lists the pollers it saw lately (``DescribeTaskQueue``), so ``/status`` can report the
effective limit without asking any worker. A poller whose identity names no limit (an older
worker) counts with this process's setting.
"""

from __future__ import annotations

import re
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

_LIMIT = re.compile(r"/llm-concurrency=(\d+)$")
DESCRIBE_TIMEOUT = timedelta(seconds=2)


def llm_worker_identity(base: str, concurrency: int) -> str:
    """The identity an LLM worker polls with: its client's, plus its limit."""
    return f"{base}/llm-concurrency={concurrency}"


def concurrency_of(identity: str, default: int) -> int:
    found = _LIMIT.search(identity)
    return int(found.group(1)) if found else default


async def llm_capacity(client: Client, task_queue: str, default: int) -> tuple[int, int]:
    """(worker processes polling ``task_queue``, their provider calls at once in all)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        ),
        timeout=DESCRIBE_TIMEOUT,
    )
    identities = {poller.identity for poller in response.pollers}
    return len(identities), sum(concurrency_of(identity, default) for identity in identities)
