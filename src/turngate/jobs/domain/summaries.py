"""What the Temporal UI shows of a job: its summary and details at start, each step's summary,
and the current details after each step (docs/TEMPORAL-UI.md).

Plain text and Temporal's markdown, built from counts, names and ids only (never a document's
text or a secret); Temporal stores them as payloads, so they pass the payload codec and are
encrypted with the rest of the history when encryption is on.
"""

from __future__ import annotations

from pydantic import BaseModel

from turngate.jobs.domain.models import JobCheckpoint, JobProgress, JobType

SUMMARY_MAX = 200  # Temporal truncates nothing, but a glance is one line


def _short(text: str, limit: int = SUMMARY_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def job_summary(job_type: JobType, case_id: str, input: BaseModel) -> str:
    """One line: what the job does to which case, e.g. ``case.ingest · case acme · 20,000 documents``."""
    parts = [job_type, f"case {case_id}"]
    documents = getattr(input, "documents", None)
    if documents is not None:
        parts.append(f"{len(documents):,} documents")
    embedder = getattr(input, "embedder", None)
    if embedder is not None:
        parts.append(f"{embedder.embedder_id}, batch {embedder.batch_size}")
    return _short(" · ".join(parts))


def job_static_details(
    job_id: str,
    case_id: str,
    *,
    correlation_id: str | None,
    tenant_id: str | None,
    web_url: str | None,
) -> str:
    """Markdown: ids, and where to read the job and its case through turngate."""
    lines = [f"**Job** `{job_id}`", f"**Case** `{case_id}`"]
    if correlation_id:
        lines.append(f"**Correlation id** `{correlation_id}`")
    if tenant_id:
        lines.append(f"**Tenant** `{tenant_id}`")
    if web_url:
        base = web_url.rstrip("/")
        lines.append(f"[Job status]({base}/jobs/{job_id}) · [Case outputs]({base}/cases/{case_id})")
    return "\n\n".join(lines)


def step_summary(stage: str, checkpoint: JobCheckpoint | None, unit: str) -> str:
    """An activity step's summary, e.g. ``embed chunks from 12,288 of 60,000``."""
    if checkpoint is None:
        return f"{stage} {unit}: first step"
    done, total = checkpoint.cursor, checkpoint.items_total
    return f"{stage} {unit} from {done:,} of {total:,} (step {checkpoint.steps + 1})"


def job_details(stage: str, progress: JobProgress, unit: str, *, run: str | None = None) -> str:
    """The current details after a step: stage, items done of total, rate."""
    rate = f" · {progress.rate_per_s:,.1f} {unit}/s" if progress.rate_per_s is not None else ""
    lines = [
        f"**{stage}** {progress.state}: {progress.items_done:,} of {progress.items_total:,} {unit} "
        f"({progress.percent:.1f}%){rate}",
        f"steps run: {progress.steps}" + (f" · run `{run}`" if run else ""),
    ]
    return "\n\n".join(lines)
