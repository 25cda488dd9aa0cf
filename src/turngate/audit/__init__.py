"""Audit: full ledger verification, ledger replay of a turn, Temporal workflow replay.

``turngate verify`` and ``turngate replay`` are thin wrappers over :mod:`turngate.audit.report`;
the checks themselves live in :mod:`turngate.audit.verification` and :mod:`turngate.audit.replay`. See
docs/AUDIT.md.
"""

from turngate.audit.verification import AuditKind, AuditReport, Finding, verify_all

__all__ = ["AuditKind", "AuditReport", "Finding", "verify_all"]
