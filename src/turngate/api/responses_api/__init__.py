"""``POST /v1/responses``: the OpenAI Responses API, as turns (docs/RESPONSES-AND-MESSAGES.md)."""
