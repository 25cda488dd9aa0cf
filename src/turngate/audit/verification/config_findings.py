"""What verify says about DECISIONs made under a config other than the current one.

Each such config digest gets one finding with the count and index range of its DECISIONs:
``config_drift`` info when they were recomputed with the stored (or a given) config;
``config_unavailable`` (in the report's ``unchecked`` list) when that config could not be had,
so they were not recomputed; and a ``config_mismatch`` failure besides when the stored bytes are
not that config (altered or corrupt).
"""

from __future__ import annotations

from collections.abc import Mapping

from turngate.artifacts.configs import ConfigLookup
from turngate.audit.verification.findings import AuditKind, Finding, Span

_WHY_NOT = {
    "missing": "no config is stored under that digest{where} (a worker stores its config when it "
    "starts: DECISIONs of an older worker, or of one with another artifact store, have none)",
    "unavailable": "the stored config{where} could not be read: {detail}",
    "invalid": "the config{where} cannot be used: {detail}",
    "mismatch": "the config stored{where} is not that config: {detail} (altered or corrupt)",
}


def _range(span: Span) -> str:
    return f"{span.count} DECISION(s) (index {span.first_index}..{span.last_index})"


def config_findings(
    drift: Mapping[str, Span],
    unchecked: Mapping[str, Span],
    lookups: Mapping[str, ConfigLookup],
    current: str,
) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """(info, unchecked, failures) for the DECISIONs made under another config than ``current``."""
    info: list[Finding] = []
    not_checked: list[Finding] = []
    failures: list[Finding] = []
    for digest, span in drift.items():
        lookup = lookups.get(digest)
        source = f"the config stored at {lookup.path}" if lookup and lookup.path else "that config (given)"
        info.append(
            _finding(
                AuditKind.CONFIG_DRIFT,
                span,
                f"{_range(span)} were made under context config {digest}, not the current "
                f"{current}: recomputed with {source}",
            )
        )
    for digest, span in unchecked.items():
        lookup = lookups.get(digest) or ConfigLookup("missing", "")
        where = f" ({lookup.path})" if lookup.path else ""
        why = _WHY_NOT[lookup.status].format(where=where, detail=lookup.detail)
        not_checked.append(
            _finding(
                AuditKind.CONFIG_UNAVAILABLE,
                span,
                f"{_range(span)} were made under context config {digest}, not the current "
                f"{current}, and {why}: their context digests were not recomputed",
            )
        )
        if lookup.status == "mismatch":
            failures.append(
                _finding(
                    AuditKind.CONFIG_MISMATCH,
                    span,
                    f"{lookup.path}: {lookup.detail}; {_range(span)} name this config",
                )
            )
    return info, not_checked, failures


def _finding(kind: AuditKind, span: Span, detail: str) -> Finding:
    return Finding(kind=kind, index=span.first_index, correlation_id=span.first_correlation_id, detail=detail)
