"""The Anthropic Messages API request turngate accepts: the body, its content blocks, its tools.

Fields turngate cannot honour are refused by name (400 ``anthropic.unsupported_parameter``);
fields Anthropic adds later are ignored, as on ``/v1/chat/completions``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from turngate.api.dropin.request import Open, parse_body, validated
from turngate.core.events import AdmissionError


class TextBlock(Open):
    type: Literal["text"]
    text: str


class ToolUseBlock(Open):
    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1, max_length=256)]
    name: str
    input: dict[str, Any]


class ToolResultBlock(Open):
    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1, max_length=256)]
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None

    def text(self) -> str:
        content = self.content
        text = content if isinstance(content, str) else "".join(block.text for block in content or ())
        return f"[tool error] {text}" if self.is_error else text


Block = TextBlock | ToolUseBlock | ToolResultBlock
_BLOCKS: dict[str, type[Block]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
}


class Message(Open):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class Tool(Open):
    type: Literal["custom"] | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None


class ToolChoice(Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class OutputFormat(Open):
    type: Literal["json_schema"]
    schema_: Annotated[dict[str, Any], Field(alias="schema")]


class OutputConfig(Open):
    effort: str | None = None
    format: OutputFormat | None = None


class Metadata(Open):
    user_id: str | None = None


#: Request fields turngate cannot honour: refused when sent with a value.
REFUSED = {
    "container": "code-execution containers are",
    "diagnostics": "diagnostics are",
    "inference_geo": "inference_geo is",
    "user_profile_id": "user profiles are",
    "workspace_id": "workspaces are",
    "top_k": "top_k is",
    "mcp_servers": "MCP servers are",
}


class MessagesRequest(Open):
    model: Annotated[str, Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)]
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None
    thinking: dict[str, Any] | None = None
    service_tier: str | None = None
    speed: str | None = None
    temperature: float | None = None
    top_p: float | None = None


def unsupported(field: str, what: str) -> AdmissionError:
    return AdmissionError("anthropic.unsupported_parameter", f"{field}: {what} not supported", field)


def parse_request(data: Any) -> MessagesRequest:
    request = parse_body(data, MessagesRequest, REFUSED, unsupported)
    if request.thinking and request.thinking.get("type") != "disabled":
        raise unsupported("thinking", "extended thinking is")
    if request.speed not in (None, "standard"):
        raise unsupported("speed", f"speed {request.speed!r} is")
    return request


def blocks(message: Message, position: int) -> list[Block]:
    """A message's content as typed blocks (a string is one text block)."""
    if isinstance(message.content, str):
        return [TextBlock(type="text", text=message.content)]
    typed: list[Block] = []
    for index, raw in enumerate(message.content):
        where = f"messages[{position}].content[{index}]"
        model = _BLOCKS.get(str(raw.get("type")))
        if model is None:
            raise AdmissionError(
                "anthropic.unsupported_content",
                f"{where}: blocks of type {raw.get('type')!r} are not supported "
                "(text, tool_use, tool_result)",
                where,
            )
        typed.append(validated(model, raw, where))
    return typed


def custom_tools(request: MessagesRequest) -> list[Tool]:
    tools: list[Tool] = []
    for index, raw in enumerate(request.tools or ()):
        if raw.get("type") not in (None, "custom"):
            raise AdmissionError(
                "anthropic.unsupported_tool",
                f"tools[{index}]: tools of type {raw.get('type')!r} are not supported (custom tools)",
                f"tools[{index}]",
            )
        tools.append(validated(Tool, raw, f"tools[{index}]"))
    return tools
