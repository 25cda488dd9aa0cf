"""Output safety rules: each rule fires, first violation by rule order, unsafe regexes refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from turngate.core.safety import SafetyRules, check_output, parse_safety_rules, rules_digest

RULES = parse_safety_rules(
    {
        "rules": [
            {"id": "len", "type": "max_length", "max_chars": 60},
            {"id": "words", "type": "blocklist", "words": ["card number", "PIN", "slaptažodis"]},
            {
                "id": "links",
                "type": "regex",
                "pattern": r"https?://(?!example\.org\b)\S+",
                "ignore_case": True,
            },
        ]
    }
)


def test_clean_text_passes() -> None:
    verdict = check_output("Labas! Tai tik pavyzdys: https://example.org/x", RULES)
    assert verdict.ok and verdict.rule_id is None and verdict.reason_code is None


@pytest.mark.parametrize(
    ("text", "rule_id", "reason"),
    [
        ("x" * 61, "len", "safety.max_length"),
        ("Send me your Card   Number now", "words", "safety.blocklist"),
        ("what is your pin?", "words", "safety.blocklist"),
        ("Įvesk SLAPTAŽODIS čia", "words", "safety.blocklist"),
        ("go to HTTP://evil.test/login", "links", "safety.regex"),
    ],
)
def test_each_rule_fires(text: str, rule_id: str, reason: str) -> None:
    verdict = check_output(text, RULES)
    assert (verdict.ok, verdict.rule_id, verdict.reason_code) == (False, rule_id, reason)
    assert verdict.detail


def test_blocklist_is_whole_word() -> None:
    for text in ("spinning", "PINK", "slaptažodiškai", "cardnumber"):
        assert check_output(text, RULES).ok, text


def test_first_violated_rule_in_rule_order_wins() -> None:
    text = "your PIN at http://evil.test " + "x" * 40
    assert check_output(text, RULES).rule_id == "len"
    reordered = SafetyRules(rules=(RULES.rules[2], RULES.rules[1], RULES.rules[0]))
    assert check_output(text, reordered).rule_id == "links"
    assert check_output("PIN http://evil.test", reordered).rule_id == "links"


@pytest.mark.parametrize(
    "pattern",
    [r"(a+)+$", r"(\w*\s?)*x", r"(a|ab)*c", r"(x+x+)+y", r"(a)\1", r"((ab)*)+", r"(?:a{2,})*"],
)
def test_catastrophic_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValidationError):
        parse_safety_rules([{"id": "r", "type": "regex", "pattern": pattern}])


@pytest.mark.parametrize(
    "pattern", [r"(\d{1,3}\.){3}\d{1,3}", r"https?://\S+", r"(?:foo|bar)\b", r"[a-z]+@[a-z]+"]
)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    parse_safety_rules([{"id": "r", "type": "regex", "pattern": pattern}])


def test_invalid_pattern_is_refused() -> None:
    with pytest.raises(ValidationError, match="does not compile"):
        parse_safety_rules([{"id": "r", "type": "regex", "pattern": "(unclosed"}])


def test_regex_input_cap_fails_closed() -> None:
    rules = SafetyRules(rules=RULES.rules[2:], regex_max_input_chars=10)
    verdict = check_output("short text but longer than ten", rules)
    assert (verdict.ok, verdict.reason_code) == (False, "safety.regex")
    assert "fails closed" in (verdict.detail or "")


def test_empty_rules_admit_everything_and_digest_names_the_rules() -> None:
    assert check_output("anything", SafetyRules()).ok
    assert rules_digest(RULES) == rules_digest(parse_safety_rules(RULES.model_dump(mode="json")))
    assert rules_digest(RULES) != rules_digest(SafetyRules(rules=RULES.rules[:2]))


def test_rule_config_errors() -> None:
    with pytest.raises(ValidationError):
        parse_safety_rules([{"id": "a", "type": "blocklist", "words": []}])
    with pytest.raises(ValidationError):
        parse_safety_rules([{"id": "a", "type": "max_length", "max_chars": 0}])
    with pytest.raises(ValidationError):
        parse_safety_rules([{"id": "a", "type": "nope"}])
