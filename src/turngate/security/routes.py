"""Which role each route needs. One table; anything not in it needs ``admin`` (fail closed), so
a new route is never public by accident. The table-driven test in tests/security walks every
route of the OpenAPI schema against it."""

from __future__ import annotations

from turngate.security.principal import ROLE_ADMIN, ROLE_INTENT_WRITE, ROLE_REVIEW, ROLE_SNAPSHOT_READ

#: No credentials needed (load balancers and probes).
PUBLIC = "public"
#: Any valid key, whatever its roles.
AUTHENTICATED = "authenticated"
#: The admin role and no tenant (an operator key, tenant ``*``, or an admin token without a
#: tenant): routes over every tenant's data at once, which a tenant's own admin must not see.
OPERATOR = "operator"

ROUTE_ROLES: dict[str, str] = {
    "/healthz": PUBLIC,
    "/ingress/intent": ROLE_INTENT_WRITE,
    "/snapshot": ROLE_SNAPSHOT_READ,
    "/tail": ROLE_SNAPSHOT_READ,
    "/verify": ROLE_SNAPSHOT_READ,
    "/status": ROLE_SNAPSHOT_READ,
    "/turns/{correlation_id}/stream": ROLE_SNAPSHOT_READ,
    # What the gateway offers (providers, models, limits; never a key): any caller with a key.
    "/capabilities": AUTHENTICATED,
    # Case jobs (docs/JOBS.md): read like the ledger; uploads and cancels like ingress.
    "/jobs": ROLE_SNAPSHOT_READ,
    "/jobs/{job_id}": ROLE_SNAPSHOT_READ,
    "DELETE /jobs/{job_id}": ROLE_INTENT_WRITE,
    "/cases/{case_id}": ROLE_SNAPSHOT_READ,
    "/artifacts": ROLE_INTENT_WRITE,
    # The OpenAI-compatible endpoint (docs/OPENAI.md): a call is an intent; the model list is
    # what /capabilities offers.
    "/v1/chat/completions": ROLE_INTENT_WRITE,
    "/v1/models": AUTHENTICATED,
    # The Responses and Anthropic Messages endpoints (docs/RESPONSES-AND-MESSAGES.md): intents too.
    "/v1/responses": ROLE_INTENT_WRITE,
    "/v1/messages": ROLE_INTENT_WRITE,
    # Operational, cross-tenant aggregates: operators only.
    "/metrics": OPERATOR,
    # Decrypts every prompt and answer in Temporal histories (the Temporal UI's codec server),
    # which hold every tenant's turns: operators only.
    "/codec/encode": OPERATOR,
    "/codec/decode": OPERATOR,
    # The policy lifecycle (docs/POLICIES.md): runs installed policies over every tenant's turns.
    "POST /policy/whatif": ROLE_ADMIN,
    "/policy/history": ROLE_ADMIN,
    # Human review (docs/REVIEWS.md): the turns a policy sent to review, and their verdicts.
    "/reviews": ROLE_REVIEW,
    "/reviews/{correlation_id}": ROLE_REVIEW,
    "/reviews/{correlation_id}/approve": ROLE_REVIEW,
    "/reviews/{correlation_id}/deny": ROLE_REVIEW,
}

#: What the opt-in keyless read-only mode (TURNGATE_KEYLESS_READ, docs/SECURITY.md) opens to a
#: request without credentials, GET only: the observation surfaces an observer client of the
#: published DBL gateway reads. Nothing else: ingress, /verify, streams, jobs and the UI keep
#: needing a key.
KEYLESS_READ_ROUTES: frozenset[str] = frozenset({"/snapshot", "/tail", "/status", "/capabilities"})

#: Routes that also take the key as Anthropic's ``x-api-key`` header (``Authorization`` wins).
API_KEY_HEADER_ROUTES = frozenset({"/v1/messages"})

#: JSON routes of the web UI (src/turngate/api/ui_api.py) read what /snapshot reads. Its static
#: files are a mount, not API routes, and are public.
UI_PREFIX = "/ui/"


def required_role(path: str, method: str = "GET") -> str:
    """The role the route template ``path`` needs (``PUBLIC``, ``AUTHENTICATED``, ``OPERATOR`` or a role) when
    called with ``method``: a ``"METHOD /path"`` entry overrides the path's own."""
    specific = f"{method.upper()} {path}"
    if specific in ROUTE_ROLES:
        return ROUTE_ROLES[specific]
    if path in ROUTE_ROLES:
        return ROUTE_ROLES[path]
    if path.startswith(UI_PREFIX):
        return ROLE_SNAPSHOT_READ
    return ROLE_ADMIN
