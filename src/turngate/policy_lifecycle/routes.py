"""`POST /policy/whatif` and `GET /policy/history`: the policy lifecycle for operators (admin role).

A what-if runs a policy that is already installed on the server, named from an allow-list
(:func:`allowed_policies`): the built-in policies, the configured active and shadow policies, and
``TURNGATE_WHATIF_POLICIES``. Code is never uploaded. The run is the CLI's
(:func:`turngate.policy_lifecycle.whatif.run_whatif`), in one process in a worker thread.
A key scoped to a tenant sees that tenant's turns only.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from turngate.api.error_responses import error_response
from turngate.api.state import ApiState, api_state
from turngate.policy_lifecycle.history import PolicyHistory
from turngate.policy_lifecycle.whatif import WhatIfReport, utc_moment
from turngate.security.auth import request_principal
from turngate.settings import Settings

router = APIRouter()

BUILT_IN_POLICIES = (
    "turngate.policies.allow_all",
    "turngate.policies.deny_all",
    "turngate.policies.max_user_messages",
)
DEFAULT_OBJECT = "POLICY"


class WhatIfRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    module: str = Field(min_length=1, max_length=300)
    object: str | None = Field(None, min_length=1, max_length=200)
    thread_id: str | None = None
    tenant_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, moment: datetime | None) -> datetime | None:
        # one naive and one aware moment would not compare; a zone can push year 1 out of range
        return None if moment is None else utc_moment(moment)


def policy_name(module: str, object_name: str | None = None) -> str:
    """``module:object`` (the object from ``module:object``, else ``object_name``, else POLICY)."""
    module = module.strip()
    if ":" in module:
        module, _, named = module.partition(":")
        object_name = named or object_name
    return f"{module.strip()}:{(object_name or DEFAULT_OBJECT).strip()}"


def allowed_policies(settings: Settings) -> frozenset[str]:
    names = [*BUILT_IN_POLICIES, *settings.shadow_policies, *settings.whatif_policy_names]
    if settings.policy_module:
        names.append(policy_name(settings.policy_module, settings.policy_object))
    return frozenset(policy_name(name) for name in names)


@router.post("/policy/whatif", response_model=None, responses={200: {"model": WhatIfReport}})
async def policy_whatif(
    body: WhatIfRequest, request: Request, state: Annotated[ApiState, Depends(api_state)]
) -> dict[str, Any] | JSONResponse:
    """Decide every recorded turn of the selection again with an installed policy and list what
    would change (the JSON of `turngate policy whatif --json`)."""
    from turngate.core.policy import PolicyLoadError, load_policy
    from turngate.policy_lifecycle.whatif import WhatIfQuery, run_whatif

    name = policy_name(body.module, body.object)
    if name not in allowed_policies(state.settings):
        return error_response(
            403,
            "policy.whatif_not_allowed",
            f"{name} is not on the what-if allow-list (built-in policies, the configured active and "
            "shadow policies, TURNGATE_WHATIF_POLICIES)",
        )
    if body.since is not None and body.until is not None and body.since > body.until:
        return error_response(422, "request.invalid_parameter", "since is after until")
    module, _, object_name = name.partition(":")
    try:
        policy = load_policy(module, object_name)
    except PolicyLoadError as exc:
        return error_response(422, PolicyLoadError.code, str(exc))
    tenant = request_principal(request).tenant_id
    if tenant is not None and body.tenant_id not in (None, tenant):
        return error_response(403, "auth.forbidden", "a tenant-scoped key sees its own tenant's turns only")
    query = WhatIfQuery(
        thread_id=body.thread_id, tenant_id=tenant or body.tenant_id, since=body.since, until=body.until
    )
    config = state.settings.context_config()
    report = await asyncio.to_thread(
        run_whatif, state.store, policy, context_config=config, query=query, workers=1
    )
    return report.model_dump(mode="json")


@router.get("/policy/history", response_model=None, responses={200: {"model": PolicyHistory}})
async def policy_history_route(
    request: Request, state: Annotated[ApiState, Depends(api_state)]
) -> dict[str, Any]:
    """Every (policy id, version, config digest) in the ledger's DECISIONs, with counts."""
    from turngate.policy_lifecycle.history import policy_history

    history = await asyncio.to_thread(
        policy_history, state.store, tenant_id=request_principal(request).tenant_id
    )
    return history.model_dump(mode="json")
