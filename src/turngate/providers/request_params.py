"""A request's options (structured output, tool choice, sampling) in each vendor's wire format.

One function per vendor maps what it can honour and refuses the rest with
``provider.unsupported_parameter`` (non-retryable; the client gets 400 with that code), so no
option the client set is silently dropped. The table of what each vendor honours is in
docs/OPENAI.md ("Request fields").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turngate.core.request_options import REASON_UNSUPPORTED_PARAMETER, ProviderOptions
from turngate.providers.base import ProviderError, ProviderRequest, ToolDefinition
from turngate.providers.tool_calls import function_tools

#: OpenAI sampling options forwarded as they are.
_OPENAI_PASSTHROUGH = (
    "parallel_tool_calls",
    "top_p",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "reasoning_effort",
)
#: Anthropic's ``output_config.effort`` levels (OpenAI's ``none`` / ``minimal`` have none).
_ANTHROPIC_EFFORT = frozenset({"low", "medium", "high", "xhigh"})


def unsupported(vendor: str, names: Sequence[str]) -> ProviderError:
    return ProviderError(
        REASON_UNSUPPORTED_PARAMETER,
        f"{vendor} cannot honour {', '.join(names)} (docs/OPENAI.md, 'Request fields')",
        retryable=False,
        status_code=400,
    )


def _refuse_set(vendor: str, options: ProviderOptions, names: Sequence[str]) -> None:
    found = [name for name in names if getattr(options, name) is not None]
    if found:
        raise unsupported(vendor, found)


def _check_named_tool(vendor: str, options: ProviderOptions, tools: Sequence[ToolDefinition]) -> None:
    choice = options.tool_choice
    if choice is None or choice.mode in ("none", "auto"):
        return
    if not tools:
        raise unsupported(vendor, [f"tool_choice {choice.mode!r} without tools offered"])
    if choice.mode == "function" and choice.name not in {tool.name for tool in tools}:
        raise unsupported(vendor, [f"tool_choice naming {choice.name!r}, which is not offered"])


# --------------------------------------------------------------------------- OpenAI


def openai_tools(tools: Sequence[ToolDefinition], options: ProviderOptions | None) -> list[dict[str, Any]]:
    """``[{"type": "function", "function": {name, description, parameters[, strict]}}]``."""
    strict = set(options.strict_tools or ()) if options is not None else set()
    wire = function_tools(tools)
    for entry in wire:
        if entry["function"]["name"] in strict:
            entry["function"]["strict"] = True
    return wire


def openai_params(request: ProviderRequest) -> dict[str, Any]:
    """Chat Completions parameters for the request's limit and options (all honoured)."""
    options = request.options
    params: dict[str, Any] = {}
    limit_name = "max_completion_tokens" if options and options.max_completion_tokens else "max_tokens"
    if request.max_tokens is not None:
        params[limit_name] = request.max_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.tools:
        params["tools"] = openai_tools(request.tools, options)
    if options is None:
        return params
    _check_named_tool("openai", options, request.tools)
    for name in _OPENAI_PASSTHROUGH:
        value = getattr(options, name)
        if value is not None and (name != "parallel_tool_calls" or request.tools):
            params[name] = value  # parallel_tool_calls without tools: OpenAI refuses it
    if options.stop is not None:
        params["stop"] = list(options.stop)
    if options.tool_choice is not None:
        params["tool_choice"] = options.tool_choice.wire()
    if options.response_format is not None:
        params["response_format"] = options.response_format.wire()
    return params


# --------------------------------------------------------------------------- Anthropic


def anthropic_tools(tools: Sequence[ToolDefinition], options: ProviderOptions | None) -> list[dict[str, Any]]:
    """``[{name, description, input_schema[, strict]}]`` for the Messages API."""
    strict = set(options.strict_tools or ()) if options is not None else set()
    wire = []
    for tool in tools:
        entry: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.parameters,
        }
        if tool.name in strict:
            entry["strict"] = True
        wire.append(entry)
    return wire


def _anthropic_tool_choice(options: ProviderOptions) -> dict[str, Any] | None:
    choice = options.tool_choice
    wire: dict[str, Any] | None = None
    if choice is not None:
        modes: dict[str, dict[str, Any]] = {
            "none": {"type": "none"},
            "auto": {"type": "auto"},
            "required": {"type": "any"},
            "function": {"type": "tool", "name": choice.name},
        }
        wire = modes[choice.mode]
    if options.parallel_tool_calls is False:
        wire = dict(wire or {"type": "auto"})
        if wire["type"] != "none":
            wire["disable_parallel_tool_use"] = True
    return wire


def anthropic_params(request: ProviderRequest) -> dict[str, Any]:
    """Messages API parameters for the request's tools and options (what Anthropic has no
    equivalent for is refused)."""
    options = request.options
    params: dict[str, Any] = {}
    if request.tools:
        params["tools"] = anthropic_tools(request.tools, options)
    if options is None:
        return params
    _refuse_set("anthropic", options, ("seed", "frequency_penalty", "presence_penalty", "top_p"))
    _check_named_tool("anthropic", options, request.tools)
    choice = _anthropic_tool_choice(options)
    if choice is not None and request.tools:
        params["tool_choice"] = choice
    if options.stop is not None:
        params["stop_sequences"] = list(options.stop)
    output: dict[str, Any] = {}
    schema = options.response_format.target_schema() if options.response_format is not None else None
    if schema is not None:
        output["format"] = {"type": "json_schema", "schema": schema}
    if options.reasoning_effort is not None:
        if options.reasoning_effort not in _ANTHROPIC_EFFORT:
            raise unsupported("anthropic", [f"reasoning_effort {options.reasoning_effort!r}"])
        output["effort"] = options.reasoning_effort
    if output:
        params["output_config"] = output
    return params


# --------------------------------------------------------------------------- Ollama


@dataclass(frozen=True)
class OllamaParams:
    """``format`` and ``options`` of an Ollama chat call; ``forced_tool``: the one tool the call
    must call, asked for as structured output (Ollama has no ``tool_choice``), whose JSON answer
    becomes that tool's call."""

    format: Literal["json"] | dict[str, Any] | None
    options: dict[str, Any]
    forced_tool: str | None = None
    tools: list[dict[str, Any]] | None = None


def _forced_tool(options: ProviderOptions, tools: Sequence[ToolDefinition]) -> ToolDefinition | None:
    choice = options.tool_choice
    if choice is None or choice.mode in ("none", "auto"):
        return None
    if choice.mode == "required" and len(tools) != 1:
        raise unsupported("ollama", ["tool_choice 'required' with more than one tool offered"])
    name = choice.name if choice.mode == "function" else tools[0].name
    return next(tool for tool in tools if tool.name == name)


def ollama_params(request: ProviderRequest) -> OllamaParams:
    """Ollama's ``format`` and ``options`` for the request (what it has no equivalent for is
    refused)."""
    options: dict[str, Any] = {}
    if request.max_tokens is not None:
        options["num_predict"] = request.max_tokens
    if request.temperature is not None:
        options["temperature"] = request.temperature
    wire_tools = function_tools(request.tools)
    settings = request.options
    if settings is None:
        return OllamaParams(format=None, options=options, tools=wire_tools or None)
    _refuse_set("ollama", settings, ("reasoning_effort",))
    if settings.parallel_tool_calls is False and request.tools:
        raise unsupported("ollama", ["parallel_tool_calls false"])
    _check_named_tool("ollama", settings, request.tools)
    for name in ("top_p", "seed", "frequency_penalty", "presence_penalty"):
        value = getattr(settings, name)
        if value is not None:
            options[name] = value
    if settings.stop is not None:
        options["stop"] = list(settings.stop)
    format_: Literal["json"] | dict[str, Any] | None = None
    response_format = settings.response_format
    if response_format is not None and response_format.type == "json_object":
        format_ = "json"
    elif response_format is not None and response_format.type == "json_schema":
        format_ = response_format.target_schema()
    if settings.tool_choice is not None and settings.tool_choice.mode == "none":
        wire_tools = []  # Ollama has no tool_choice: offering none is how a call is ruled out
    forced = _forced_tool(settings, request.tools)
    if forced is not None:
        if format_ is not None:
            raise unsupported("ollama", ["response_format together with a forced tool_choice"])
        return OllamaParams(format=forced.parameters, options=options, forced_tool=forced.name, tools=None)
    return OllamaParams(format=format_, options=options, tools=wire_tools or None)
