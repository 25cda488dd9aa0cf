"""The OpenAI-compatible front door: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Each call becomes an ordinary turn (INTENT -> DECISION -> EXECUTION) admitted through the same
path as ``POST /ingress/intent``; see docs/OPENAI.md.
"""
