"""A gRPC server on loopback that answers like a Temporal frontend where the OperatorService is
refused (Temporal Cloud, a role without operator rights): GetSystemInfo answers, so clients
connect; listing and/or adding search attributes answers PERMISSION_DENIED; every other call
UNIMPLEMENTED."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    AddSearchAttributesResponse,
    ListSearchAttributesRequest,
    ListSearchAttributesResponse,
)
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest, GetSystemInfoResponse

WORKFLOW_SERVICE = "temporal.api.workflowservice.v1.WorkflowService"
OPERATOR_SERVICE = "temporal.api.operatorservice.v1.OperatorService"


def _system_info(request: GetSystemInfoRequest, context: Any) -> GetSystemInfoResponse:
    return GetSystemInfoResponse(server_version="1.0.0-refusing")


def _deny(request: Any, context: Any) -> Any:
    context.abort(grpc.StatusCode.PERMISSION_DENIED, "operator APIs are not allowed for this caller")


def _list_some(known: list[str]) -> Any:
    def handler(request: ListSearchAttributesRequest, context: Any) -> ListSearchAttributesResponse:
        return ListSearchAttributesResponse(custom_attributes={name: 2 for name in known})  # 2: KEYWORD

    return handler


@contextlib.contextmanager
def refusing_frontend(*, list_allowed: bool, known: list[str] | None = None) -> Iterator[str]:
    """Yields its ``host:port``. ``list_allowed``: listing answers (with ``known`` registered)
    and only adding is refused; otherwise both are refused."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    workflow = grpc.method_handlers_generic_handler(
        WORKFLOW_SERVICE,
        {
            "GetSystemInfo": grpc.unary_unary_rpc_method_handler(
                _system_info,
                request_deserializer=GetSystemInfoRequest.FromString,
                response_serializer=GetSystemInfoResponse.SerializeToString,
            )
        },
    )
    lister = _list_some(known or []) if list_allowed else _deny
    operator = grpc.method_handlers_generic_handler(
        OPERATOR_SERVICE,
        {
            "ListSearchAttributes": grpc.unary_unary_rpc_method_handler(
                lister,
                request_deserializer=ListSearchAttributesRequest.FromString,
                response_serializer=ListSearchAttributesResponse.SerializeToString,
            ),
            "AddSearchAttributes": grpc.unary_unary_rpc_method_handler(
                _deny,
                request_deserializer=AddSearchAttributesRequest.FromString,
                response_serializer=AddSearchAttributesResponse.SerializeToString,
            ),
        },
    )
    server.add_generic_rpc_handlers((workflow, operator))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
