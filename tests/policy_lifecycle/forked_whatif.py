"""Run by test_whatif_limits.py in a fresh, single-threaded process: what-if in 2 processes
(rebalanced) gives the one-process report, also when the second process dies at once."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from bench.verify import build_ledger

from turngate.audit.forked_ranges import can_fork
from turngate.core.context import load_context_config
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore
from turngate.policy_lifecycle.whatif import run_whatif


def main() -> int:
    assert can_fork(), "a fresh process must be able to fork"
    with tempfile.TemporaryDirectory() as workdir:
        store = LedgerStore(f"sqlite:///{Path(workdir) / 'ledger.sqlite3'}")
        try:
            build_ledger(store, 400, threads=20, deny_every=7)
            policy, cfg = load_policy("turngate.policies.deny_all"), load_context_config(None, {})
            one = run_whatif(store, policy, context_config=cfg, workers=1).model_dump(exclude={"duration_ms"})
            two = run_whatif(store, policy, context_config=cfg, workers=2, batch_size=7)
            assert two.model_dump(exclude={"duration_ms"}) == one, "2 processes differ from 1"
            assert one["checked"] == 400 and len(one["flipped"]) > 300, one["checked"]
            # The forked process dies as it starts (it disposes of the inherited pool first).
            dispose = store.engine.dispose
            store.engine.dispose = lambda close=True: os._exit(9)  # type: ignore[method-assign]
            try:
                crashed = run_whatif(store, policy, context_config=cfg, workers=2, batch_size=7)
            finally:
                store.engine.dispose = dispose  # type: ignore[method-assign]
            assert crashed.model_dump(exclude={"duration_ms"}) == one, "a dead process lost turns"
        finally:
            store.close()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
