"""Output safety rules (prompt assembly's safety check): deterministic checks over a model's answer.

Rules come from configuration (``output_safety`` in a prompt pack's ``profiles.json``) and run
in their configured order; :func:`check_output` reports the first rule the text violates.

Rule types:

* ``blocklist``: case-insensitive whole-word (or whole-phrase) matches of configured terms.
* ``regex``: a Python regular expression. Patterns are compiled once and screened when the rules
  are parsed: backreferences, nested quantifiers where either is unbounded (``(a+)+``,
  ``(\\w*\\s?)*``) and alternations inside an unbounded quantifier (``(a|ab)*``) are rejected,
  so no pattern can backtrack exponentially. As a second guard a
  text longer than ``regex_max_input_chars`` fails a regex rule closed (it is not scanned).
* ``max_length``: at most ``max_chars`` characters.

Everything here is pure: the same text and rules always give the same verdict, and
:func:`rules_digest` names the rule set in a DECISION.
"""

from __future__ import annotations

import re
import re._constants as _sre_constants  # type: ignore[import-not-found]  # the stdlib's own regex parser
import re._parser as _sre_parser  # type: ignore[import-not-found]  # (typeshed has no stubs for it)
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from turngate.core.canonical import digest

REASON_BLOCKLIST = "safety.blocklist"
REASON_REGEX = "safety.regex"
REASON_MAX_LENGTH = "safety.max_length"
#: Artifact kind of a redacted answer's raw text: a restricted snapshot that only ``admin`` keys
#: may read through the API (docs/SECURITY.md, "Redacted answers").
REDACTED_OUTPUT_KIND = "redacted_output"

DEFAULT_REGEX_MAX_INPUT_CHARS = 16_384
MAX_PATTERN_CHARS = 1_000

RuleId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Term = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
SafetyReason = Literal["safety.blocklist", "safety.regex", "safety.max_length"]

_REPEATS = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, _sre_constants.POSSESSIVE_REPEAT}
_BACKREFS = {_sre_constants.GROUPREF, _sre_constants.GROUPREF_EXISTS, _sre_constants.GROUPREF_IGNORE}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _pattern_hazard(pattern: str, flags: int) -> str | None:
    """Why ``pattern`` could backtrack catastrophically, or None when it is safe to run."""
    try:
        parsed = _sre_parser.parse(pattern, flags)
    except re.error as exc:
        return f"does not compile: {exc}"

    def walk(items: Any, enclosing: tuple[bool, ...]) -> str | None:
        # ``enclosing``: one entry per enclosing multi-repeat, True when that repeat is unbounded.
        for op, av in items:
            if op in _BACKREFS:
                return "uses a backreference"
            if op in _REPEATS:
                _low, high, sub = av
                unbounded = high == _sre_constants.MAXREPEAT
                if high > 1:
                    if enclosing and (unbounded or any(enclosing)):
                        return "has a nested quantifier where one of them is unbounded"
                    found = walk(sub, (*enclosing, unbounded))
                else:
                    found = walk(sub, enclosing)
            elif op == _sre_constants.SUBPATTERN:
                found = walk(av[3], enclosing)
            elif op == _sre_constants.BRANCH:
                if any(enclosing):
                    return "has an alternation inside an unbounded quantifier"
                found = next((r for b in av[1] if (r := walk(b, enclosing)) is not None), None)
            elif op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
                found = walk(av[1], enclosing)
            elif op == _sre_constants.ATOMIC_GROUP:
                found = walk(av, enclosing)
            else:
                found = None
            if found is not None:
                return found
        return None

    return walk(parsed, ())


@lru_cache(maxsize=256)
def _compile(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def _blocklist_pattern(words: tuple[str, ...]) -> str:
    # Longest first so a phrase wins over its own first word; whitespace inside a phrase
    # matches any whitespace run; (?<!\w)...(?!\w) makes it a whole-word match.
    alternatives = [
        r"\s+".join(re.escape(part) for part in word.split())
        for word in sorted(set(words), key=lambda w: (-len(w), w))
    ]
    return r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)"


class BlocklistRule(_Frozen):
    id: RuleId
    type: Literal["blocklist"]
    words: tuple[Term, ...] = Field(min_length=1, max_length=1000)

    def compiled(self) -> re.Pattern[str]:
        return _compile(_blocklist_pattern(self.words), re.IGNORECASE)


class RegexRule(_Frozen):
    id: RuleId
    type: Literal["regex"]
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS)
    ignore_case: bool = False

    @property
    def flags(self) -> int:
        return re.IGNORECASE if self.ignore_case else 0

    @model_validator(mode="after")
    def _safe_pattern(self) -> RegexRule:
        hazard = _pattern_hazard(self.pattern, self.flags)
        if hazard is not None:
            raise ValueError(f"regex rule {self.id!r}: the pattern {hazard}")
        _compile(self.pattern, self.flags)
        return self

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern, self.flags)


class MaxLengthRule(_Frozen):
    id: RuleId
    type: Literal["max_length"]
    max_chars: int = Field(ge=1)


SafetyRule = Annotated[BlocklistRule | RegexRule | MaxLengthRule, Field(discriminator="type")]


class SafetyRules(_Frozen):
    """An ordered rule set. An empty set admits every text."""

    rules: tuple[SafetyRule, ...] = ()
    regex_max_input_chars: int = Field(DEFAULT_REGEX_MAX_INPUT_CHARS, ge=1)

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: tuple[SafetyRule, ...]) -> tuple[SafetyRule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"duplicate safety rule id {rule.id!r}")
            seen.add(rule.id)
        return rules


class SafetyVerdict(_Frozen):
    """``ok`` or the first violated rule: its id, a stable reason code and a short detail."""

    ok: bool
    rule_id: str | None = None
    reason_code: SafetyReason | None = None
    detail: str | None = None


_OK = SafetyVerdict(ok=True)


def parse_safety_rules(data: Any) -> SafetyRules:
    """Validate a rule set from configuration (``{"rules": [...]}`` or a bare list of rules)."""
    if isinstance(data, list):
        data = {"rules": data}
    return SafetyRules.model_validate(data)


def check_output(text: str, rules: SafetyRules) -> SafetyVerdict:
    """The verdict for ``text``: the first violated rule in rule order, or ok."""
    for rule in rules.rules:
        if isinstance(rule, MaxLengthRule):
            if len(text) > rule.max_chars:
                return SafetyVerdict(
                    ok=False,
                    rule_id=rule.id,
                    reason_code=REASON_MAX_LENGTH,
                    detail=f"{len(text)} characters exceed max_chars={rule.max_chars}",
                )
        elif isinstance(rule, BlocklistRule):
            match = rule.compiled().search(text)
            if match is not None:
                return SafetyVerdict(
                    ok=False,
                    rule_id=rule.id,
                    reason_code=REASON_BLOCKLIST,
                    detail=f"blocklisted term {match.group(0)!r} at offset {match.start()}",
                )
        else:
            if len(text) > rules.regex_max_input_chars:
                return SafetyVerdict(
                    ok=False,
                    rule_id=rule.id,
                    reason_code=REASON_REGEX,
                    detail=f"{len(text)} characters exceed regex_max_input_chars="
                    f"{rules.regex_max_input_chars}; the text is not scanned and fails closed",
                )
            match = rule.compiled().search(text)
            if match is not None:
                return SafetyVerdict(
                    ok=False,
                    rule_id=rule.id,
                    reason_code=REASON_REGEX,
                    detail=f"pattern matched at offset {match.start()}",
                )
    return _OK


def rules_digest(rules: SafetyRules) -> str:
    """``sha256:<hex>`` of the rule set's canonical JSON (recorded in the DECISION)."""
    return digest(rules.model_dump(mode="json"))
