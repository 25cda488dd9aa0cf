"""The ledger's exceptions (a module of their own so every ledger module can raise them)."""

from __future__ import annotations


class LedgerError(Exception):
    """Base class of every error the ledger raises."""


class LedgerConflictError(LedgerError):
    """A different event already exists under the same (correlation_id, kind)."""

    def __init__(self, correlation_id: str, kind: str, existing_index: int) -> None:
        super().__init__(
            f"ledger conflict: event ({correlation_id!r}, {kind}) already exists at index "
            f"{existing_index} with a different identity or payload"
        )
        self.correlation_id = correlation_id
        self.kind = kind
        self.existing_index = existing_index


class LedgerUnavailableError(LedgerError):
    """The database cannot be reached, opened, locked or written (the operation may be retried)."""
