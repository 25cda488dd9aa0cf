"""``POST /v1/messages``: the Anthropic Messages API, as turns (docs/RESPONSES-AND-MESSAGES.md)."""
