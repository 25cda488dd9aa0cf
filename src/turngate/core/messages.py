"""The chat message: one entry of the message list that assembly builds and providers send.

It lives in core because assembly produces it; providers import it from here (core imports no
provider code).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant"]
    content: str
