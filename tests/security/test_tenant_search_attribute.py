"""A turn started with a tenant-scoped key carries the tenant as the TurngateTenantId search
attribute (operators can list one tenant's turns in Temporal); an operator key's turn has none."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, running_stack
from turngate.devserver import DevServer
from turngate.settings import Settings
from turngate.workflows.shared import SA_TENANT_ID


async def test_turns_carry_their_tenant(secure_settings: Settings, temporal_server: DevServer) -> None:
    tenant_key = make_key(secure_settings, "acme", "intent.write,snapshot.read")
    operator_key = make_key(secure_settings, "*", "admin")
    async with running_stack(secure_settings) as stack:
        ids = {}
        for who, key in (("acme", tenant_key), ("operator", operator_key)):
            body = envelope("hello", correlation_id=f"c-{uuid.uuid4().hex}")
            response = await stack.http.post(
                "/ingress/intent", params={"wait": "decision"}, json=body, headers=bearer(key)
            )
            assert response.status_code == 202, response.text
            ids[who] = response.json()["workflow_id"]
    client = await Client.connect(temporal_server.address)
    described = await client.get_workflow_handle(ids["acme"]).describe()
    assert described.typed_search_attributes.get(SA_TENANT_ID) == "acme"
    operator = await client.get_workflow_handle(ids["operator"]).describe()
    assert operator.typed_search_attributes.get(SA_TENANT_ID) is None
