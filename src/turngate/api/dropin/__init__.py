"""What the Responses (``/v1/responses``) and Anthropic Messages (``/v1/messages``) endpoints
share: each translates its request into the Chat Completions request of
:mod:`turngate.api.openai_compat` and plans it there (one planning path), then runs the turn and
renders the answer, its errors and its stream in its own wire format (docs/RESPONSES-AND-MESSAGES.md).
"""
