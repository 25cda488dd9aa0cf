"""``turngate verify``: the whole ledger verified (chain, decisions, observation split, artifacts).

:func:`verify_all` checks, for the whole ledger or a thread or an index range:

a. every event digest recomputed from its stored row, every chain link and index gap: the
   ledger's chain check (:mod:`turngate.ledger.chain_check`, which digests raw rows, see
   :mod:`turngate.ledger.row_digest`);
b. every DECISION recomputed from stored inputs as :func:`turngate.core.decision.verify_decision`
   does (:mod:`.decision_recompute`: the same checks, with the input events' digests taken from
   the chain pass that just recomputed them): the INTENT of the same correlation_id and the
   candidate events of its declared refs, selected by the rules of
   ``store.fetch_ref_candidates`` over the ledger as it was when the INTENT was recorded
   (:mod:`.candidates`). A DECISION that does not verify on those gets a second opinion from
   ``store.fetch_ref_candidates`` itself before it is reported; one that does gets the
   per-DECISION checks (:mod:`.decision_checks`: the shadow policies' entries);
c. ``boundary.context_config_digest`` names the config to recompute with: the current one, a
   given earlier one, or the one stored under that digest in the artifact store
   (:mod:`.configs`; every worker stores its config at start). A DECISION whose config cannot
   be had is unchecked (``unchecked_decisions``, a ``config_unavailable`` finding), and the
   report is not ok unless unchecked DECISIONs are allowed (:mod:`.config_findings`);
d. ``normative_input_digests`` name earlier INTENT events only (the context system: no
   observation leaked);
e. every artifact pointer the gateway wrote (:func:`turngate.core.pointers.server_pointers`) is
   re-hashed by the artifact store (:mod:`.artifact_checks`); pointer-shaped objects in a
   client's data are plain data.

The ledger is streamed once in index order inside one read transaction per index range,
``batch_size`` rows at a time: each batch is parsed and digested once (the chain checks), then
its DECISIONs, EXECUTIONs and artifact pointers are checked from the same parsed rows
(:mod:`.event_checks`). Memory stays flat in the size of the ledger (every cache is bounded,
:mod:`.event_cache`), and nothing is capped. A large scope is split into index ranges verified
in parallel processes (:mod:`.ranges`, :mod:`turngate.audit.forked_ranges`) whose findings merge
into the same report (:mod:`.run`, :mod:`.findings`). It reports; it never repairs anything.
"""

from turngate.audit.verification.findings import AuditKind, AuditReport, Finding
from turngate.audit.verification.run import verify_all

__all__ = ["AuditKind", "AuditReport", "Finding", "verify_all"]
