"""Wait until given worker processes poll a task queue (``turngate dev`` with worker processes:
the API is announced once the workers that will run its turns are there)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client


async def polling_pids(client: Client, task_queue: str) -> set[int]:
    """Pids of the workers that polled ``task_queue`` lately (an SDK worker's identity is ``pid@host``)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    pids = set()
    for poller in response.pollers:
        head = poller.identity.partition("@")[0]
        if head.isdigit():
            pids.add(int(head))
    return pids


async def wait_for_pollers(
    client: Client, task_queue: str, pids: Callable[[], Collection[int]], timeout_s: float = 120.0
) -> bool:
    """True once every pid in ``pids()`` polls ``task_queue``; False after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        wanted = set(pids())
        if wanted and wanted <= await polling_pids(client, task_queue):
            return True
        await asyncio.sleep(0.2)
    return False
