"""The append-only, hash-chained event ledger (SQLite by default, PostgreSQL-ready)."""

from turngate.ledger.store import (
    MAX_PAGE,
    LedgerConflictError,
    LedgerError,
    LedgerStore,
    LedgerUnavailableError,
)
from turngate.ledger.verify import ProblemKind, VerifyProblem, VerifyReport, verify_ledger

__all__ = [
    "MAX_PAGE",
    "LedgerConflictError",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailableError",
    "ProblemKind",
    "VerifyProblem",
    "VerifyReport",
    "verify_ledger",
]
