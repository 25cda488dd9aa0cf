"""Tool gating, tool-call admission and signal -> transition mapping (prompt assembly's transition tool).

A prompt profile names tools (:class:`ToolSpec`, configured as data). A tool is *offered* to the
model only once the declared context holds at least ``min_exchanges`` completed user/assistant
exchanges, so the model cannot end a phase prematurely. Calls the model makes are *admitted* only
when the tool was offered for this turn and the arguments satisfy its parameter schema; a
signal tool maps its ``signal`` argument to a transition name (``on_success``, ...), which is
resolved against the application's own state machine: a mapping of transition name -> next phase
that the intent carries in its ``inputs``, at the path the tool spec names
(``transition_targets``; :func:`next_phase_for`).

Pure: no I/O, no clock. The parameter schema check implements the JSON Schema subset listed in
:func:`schema_errors` (other keywords are ignored), so no schema library is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from turngate.core.canonical import canonical_bytes, digest
from turngate.core.events import EventKind
from turngate.core.limits import TEXT_INLINE_LIMIT_BYTES
from turngate.core.policy import intent_message
from turngate.core.refs import Resolution

REASON_NOT_OFFERED: Final = "tool.not_offered"
REASON_INVALID_ARGUMENTS: Final = "tool.invalid_arguments"
REASON_ARGUMENTS_TOO_LARGE: Final = "tool.arguments_too_large"

#: OpenAI's (and Anthropic's) function name pattern.
ToolSpecName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
SignalName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
TransitionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]
#: A dotted path of keys into the intent's ``inputs`` (``task.ai_transitions``).
InputsPath = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_-]{0,63}){0,7}$")
]
#: Where transition targets are read when a tool spec does not say (packs written before the key
#: existed read there); a pack states its own path with ``transition_targets``.
DEFAULT_TRANSITION_TARGETS = "task.ai_transitions"
ToolRejectReason = Literal["tool.not_offered", "tool.invalid_arguments", "tool.arguments_too_large"]

_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolSpec(_Frozen):
    """A tool a profile may offer. ``signals`` maps a signal value to a transition name."""

    name: ToolSpecName
    description: str = Field(min_length=1, max_length=2000)
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(_EMPTY_OBJECT_SCHEMA))
    min_exchanges: int = Field(0, ge=0)
    signal_argument: str = "signal"
    signals: dict[SignalName, TransitionName] = Field(default_factory=dict)
    #: Where in the intent's ``inputs`` the application's transition -> next phase mapping is.
    transition_targets: InputsPath = DEFAULT_TRANSITION_TARGETS

    @model_validator(mode="after")
    def _consistent(self) -> ToolSpec:
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type 'object'")
        if self.signals:
            properties = self.parameters.get("properties")
            if not isinstance(properties, Mapping) or self.signal_argument not in properties:
                raise ValueError(
                    f"tool {self.name!r}: the signal argument {self.signal_argument!r} must be "
                    "declared in parameters.properties"
                )
            declared = properties[self.signal_argument]
            enum = declared.get("enum") if isinstance(declared, Mapping) else None
            if enum is not None and set(enum) != set(self.signals):
                raise ValueError(
                    f"tool {self.name!r}: the enum of {self.signal_argument!r} ({sorted(enum)}) "
                    f"differs from the configured signals ({sorted(self.signals)})"
                )
        return self

    def digest_body(self) -> dict[str, Any]:
        """What :func:`tools_digest` covers: the spec, ``transition_targets`` only when not the
        default (specs without it keep their earlier digest)."""
        exclude = {"transition_targets"} if self.transition_targets == DEFAULT_TRANSITION_TARGETS else set()
        return self.model_dump(mode="json", exclude=exclude)

    def definition(self) -> dict[str, Any]:
        """The provider-neutral tool definition: name, description, JSON-schema parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


class ToolCall(_Frozen):
    """A tool call as the model made it (``arguments`` already decoded from JSON)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class RejectedToolCall(_Frozen):
    name: str
    id: str | None = None
    reason_code: ToolRejectReason
    detail: str


class ToolAdmission(_Frozen):
    """Calls in their original order, split into admitted and rejected."""

    admitted: tuple[ToolCall, ...] = ()
    rejected: tuple[RejectedToolCall, ...] = ()


def offered_tools(profile_tools: Sequence[ToolSpec], exchange_count: int) -> list[ToolSpec]:
    """The tools to offer this turn: those whose ``min_exchanges`` is reached, in profile order."""
    return [spec for spec in profile_tools if exchange_count >= spec.min_exchanges]


def tools_digest(tools: Sequence[ToolSpec]) -> str:
    """``sha256:<hex>`` of the offered tool definitions (recorded with the prompt)."""
    return digest([spec.digest_body() for spec in tools])


def exchange_count(resolution: Resolution) -> int:
    """Completed user/assistant exchanges in the declared context.

    An exchange is one turn (same thread and turn id) whose INTENT carries a message and whose
    EXECUTION carries a non-empty ``output_text``. Failed executions and one-sided turns do not
    count.
    """
    asked = {
        (event.thread_id, event.turn_id)
        for event in resolution.governance_events
        if event.kind == EventKind.INTENT and intent_message(event)
    }
    answered = {
        (event.thread_id, event.turn_id)
        for event in resolution.execution_events
        if event.kind == EventKind.EXECUTION
        and isinstance(event.payload.get("output_text"), str)
        and event.payload["output_text"]
    }
    return len(asked & answered)


# --------------------------------------------------------------------------- schema subset

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(name, ()))


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Violations of ``schema`` by ``value`` (empty when valid).

    Supported keywords: ``type`` (a name or a list of names), ``enum``, ``const``,
    ``properties``, ``required``, ``additionalProperties`` (bool or schema), ``items``,
    ``minLength``, ``maxLength``, ``minimum``, ``maximum``, ``minItems``, ``maxItems``. Any other
    keyword is ignored.
    """
    errors: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(value, name) for name in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {schema['const']!r}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: above the maximum {schema['maximum']}")
    if isinstance(value, list | tuple):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for position, item in enumerate(value):
                errors += schema_errors(item, items, f"{path}[{position}]")
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                errors.append(f"{path}: missing required property {key!r}")
        extra = schema.get("additionalProperties", True)
        for key in sorted(value):
            if key in properties:
                errors += schema_errors(value[key], properties[key], f"{path}.{key}")
            elif extra is False:
                errors.append(f"{path}: unexpected property {key!r}")
            elif isinstance(extra, Mapping):
                errors += schema_errors(value[key], extra, f"{path}.{key}")
    return errors


# --------------------------------------------------------------------------- admission


def _as_call(raw: ToolCall | Mapping[str, Any]) -> tuple[ToolCall | None, str, str | None, str | None]:
    """(call, name, id, error): decode one raw call; ``error`` is set when arguments are bad."""
    if isinstance(raw, ToolCall):
        return raw, raw.name, raw.id, None
    name = raw.get("name")
    name = name if isinstance(name, str) else ""
    call_id = raw.get("id")
    call_id = call_id if isinstance(call_id, str) else None
    if raw.get("arguments_raw") is not None:
        # The provider layer could not decode the model's arguments; it kept the raw text.
        return None, name, call_id, "arguments are not a JSON object"
    arguments = raw.get("arguments", {})
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str | bytes):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return None, name, call_id, f"arguments are not valid JSON: {exc}"
    if not isinstance(arguments, dict):
        return None, name, call_id, "arguments must be a JSON object"
    return ToolCall(name=name, arguments=arguments, id=call_id), name, call_id, None


def admit_tool_calls(
    calls: Sequence[ToolCall | Mapping[str, Any]], offered: Sequence[ToolSpec]
) -> ToolAdmission:
    """Admit the calls to tools that were offered this turn, with valid arguments.

    Rejections carry ``tool.not_offered`` (unknown tool, or a tool not offered yet),
    ``tool.invalid_arguments`` (not a JSON object, schema violation, unknown signal value) or
    ``tool.arguments_too_large`` (arguments over the inline text limit: an admitted call is
    recorded with its arguments in the EXECUTION, and a tool signal is never that long).
    """
    by_name = {spec.name: spec for spec in offered}
    admitted: list[ToolCall] = []
    rejected: list[RejectedToolCall] = []
    for raw in calls:
        call, name, call_id, error = _as_call(raw)
        spec = by_name.get(name)
        if spec is None:
            rejected.append(
                RejectedToolCall(
                    name=name,
                    id=call_id,
                    reason_code=REASON_NOT_OFFERED,
                    detail=f"tool {name!r} was not offered this turn (offered: {sorted(by_name)})",
                )
            )
            continue
        problems: Sequence[str | None] = [error] if error is not None or call is None else []
        if call is not None and not problems:
            problems = schema_errors(call.arguments, spec.parameters)
            if not problems and spec.signals:
                signal = call.arguments.get(spec.signal_argument)
                if signal not in spec.signals:
                    problems = [f"$.{spec.signal_argument}: {signal!r} is not one of {sorted(spec.signals)}"]
        if call is not None and not problems:
            size = len(canonical_bytes(call.arguments))
            if size > TEXT_INLINE_LIMIT_BYTES:
                rejected.append(
                    RejectedToolCall(
                        name=name,
                        id=call_id,
                        reason_code=REASON_ARGUMENTS_TOO_LARGE,
                        detail=f"arguments are {size} bytes; the limit is {TEXT_INLINE_LIMIT_BYTES}",
                    )
                )
                continue
        if problems or call is None:
            rejected.append(
                RejectedToolCall(
                    name=name,
                    id=call_id,
                    reason_code=REASON_INVALID_ARGUMENTS,
                    detail="; ".join(str(problem) for problem in problems[:5]),
                )
            )
            continue
        admitted.append(call)
    return ToolAdmission(admitted=tuple(admitted), rejected=tuple(rejected))


def transition_for(call: ToolCall, spec: ToolSpec) -> str | None:
    """The transition name the call's signal maps to (``on_success``, ...), or None."""
    if call.name != spec.name or not spec.signals:
        return None
    signal = call.arguments.get(spec.signal_argument)
    return spec.signals.get(signal) if isinstance(signal, str) else None


def first_transition(admission: ToolAdmission, offered: Sequence[ToolSpec]) -> tuple[ToolCall, str] | None:
    """The first admitted call that maps to a transition, with that transition name."""
    by_name = {spec.name: spec for spec in offered}
    for call in admission.admitted:
        spec = by_name.get(call.name)
        transition = transition_for(call, spec) if spec is not None else None
        if transition is not None:
            return call, transition
    return None


def next_phase_for(
    call: ToolCall, transition: str, offered: Sequence[ToolSpec], inputs: Mapping[str, Any]
) -> str | None:
    """The next phase for an admitted call's transition: looked up in the mapping found in
    ``inputs`` at the called tool's ``transition_targets`` path; None when any part is missing."""
    spec = next((spec for spec in offered if spec.name == call.name), None)
    if spec is None:
        return None
    found: Any = inputs
    for key in spec.transition_targets.split("."):
        found = found.get(key) if isinstance(found, Mapping) else None
    return next_phase(transition, found)


def next_phase(transition: str, transitions: Mapping[str, Any] | None) -> str | None:
    """The application's target for ``transition`` in its transitions mapping, or None.

    The application's own state machine stays the source of truth: turngate maps a signal to a
    transition name, the caller's declared transitions map the name to a phase.
    """
    if not isinstance(transitions, Mapping):
        return None
    target = transitions.get(transition)
    return target if isinstance(target, str) and target else None
