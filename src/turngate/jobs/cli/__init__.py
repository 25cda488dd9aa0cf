"""`turngate jobs` and `turngate cases`: a client of the HTTP API (never of Temporal or the
ledger), so these commands start fast and work against a remote gateway."""
