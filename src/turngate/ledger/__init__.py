"""The append-only, hash-chained event ledger (SQLite by default, PostgreSQL at scale)."""

from turngate.ledger.chain_check import ProblemKind, VerifyProblem, VerifyReport, verify_ledger
from turngate.ledger.errors import LedgerConflictError, LedgerError, LedgerUnavailableError
from turngate.ledger.listen import NOTIFY_CHANNEL, ChangeListener
from turngate.ledger.rows import (
    MAX_PAGE,
)
from turngate.ledger.store import (
    LedgerStore,
)

__all__ = [
    "MAX_PAGE",
    "NOTIFY_CHANNEL",
    "ChangeListener",
    "LedgerConflictError",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailableError",
    "ProblemKind",
    "VerifyProblem",
    "VerifyReport",
    "verify_ledger",
]
