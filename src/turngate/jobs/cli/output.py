"""What `turngate jobs` and `turngate cases` print: tables, job details, the progress display, errors."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from turngate.jobs.cli.jobs_client import ApiError, Unreachable

_BAR_WIDTH = 24
_CASE_KINDS = ("chunks", "embeddings", "index")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def report_error(exc: ApiError | Unreachable, as_json: bool) -> int:
    if isinstance(exc, Unreachable):
        print(f"error: {exc} (is `turngate dev` running? see --url, TURNGATE_URL)", file=sys.stderr)
        return 2
    if as_json:
        print_json(exc.as_dict())
    hint = ""
    if exc.reason_code == "queue.full":
        wait = f" (Retry-After {exc.retry_after:g} s)" if exc.retry_after is not None else ""
        hint = f"\nthe job queue is full: retry later{wait}"
    elif exc.status == 401:
        hint = "\nset --api-key or TURNGATE_API_KEY"
    print(f"error: {exc.reason_code} (HTTP {exc.status}): {exc.detail}{hint}", file=sys.stderr)
    return 1


def _percent_items(job: dict[str, Any]) -> str:
    percent = float(job.get("progress") or 0.0)
    return f"{percent:5.1f}%  {job.get('items_done', 0)}/{job.get('items_total', 0)} items"


def progress_text(job: dict[str, Any]) -> str:
    return f"{_percent_items(job)}  {job.get('state')}"


class ProgressDisplay:
    """One job's progress: on a terminal a bar redrawn in place, otherwise a line per change."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last: tuple[Any, ...] | None = None
        self._open_line = False

    def update(self, job: dict[str, Any]) -> None:
        seen = (job.get("state"), job.get("progress"), job.get("items_done"), job.get("items_total"))
        if seen == self._last:
            return
        self._last = seen
        label = f"{job.get('type')} {job.get('id')}"
        if self.tty:
            filled = round(_BAR_WIDTH * min(max(float(job.get("progress") or 0.0), 0.0), 100.0) / 100)
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            self.stream.write(f"\r{label} [{bar}] {progress_text(job)}\x1b[K")
            self._open_line = True
        else:
            self.stream.write(f"{label}: {progress_text(job)}\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def job_lines(job: dict[str, Any]) -> list[str]:
    rows = [
        ("job", job.get("id")),
        ("type", job.get("type")),
        ("case", job.get("case_id") or "-"),
        ("state", job.get("state")),
        ("progress", _percent_items(job).strip()),
        ("submitted", job.get("submitted_at") or "-"),
        ("started", job.get("started_at") or "-"),
        ("finished", job.get("finished_at") or "-"),
    ]
    if job.get("error"):
        rows.append(("error", f"{job['error'].get('type')}: {job['error'].get('message')}"))
    if job.get("result") is not None:
        rows.append(("result", json.dumps(job["result"], sort_keys=True)))
    return [f"{name:<10} {value}" for name, value in rows]


def final_outcome(job: dict[str, Any]) -> int:
    """0 for a completed job; otherwise says why it ended (on stderr) and returns 1."""
    if job.get("state") == "completed":
        return 0
    error = job.get("error") or {}
    print(
        f"job {job.get('id')} {job.get('state')}: {error.get('type', job.get('state'))}: "
        f"{error.get('message', 'no message')}",
        file=sys.stderr,
    )
    return 1


def jobs_table(jobs: list[dict[str, Any]]) -> str:
    if not jobs:
        return "no jobs"
    header = ["ID", "TYPE", "CASE", "STATE", "PROGRESS", "ITEMS", "SUBMITTED"]
    rows = [
        [
            str(job.get("id")),
            str(job.get("type")),
            job.get("case_id") or "-",
            str(job.get("state")),
            f"{float(job.get('progress') or 0.0):.1f}%",
            f"{job.get('items_done', 0)}/{job.get('items_total', 0)}",
            job.get("submitted_at") or "-",
        ]
        for job in jobs
    ]
    return table(header, rows)


def case_lines(case: dict[str, Any]) -> list[str]:
    """The latest chunks/embeddings/index of a case, its records, and the index_version to pin."""
    latest = case.get("latest") or {}
    columns = ("version", "job_id", "created_at")
    rows = [[kind, *(str((latest.get(kind) or {}).get(c, "-")) for c in columns)] for kind in _CASE_KINDS]
    lines = [f"case {case.get('case_id')}", "", table(["LATEST", "VERSION", "JOB", "CREATED"], rows)]
    records = case.get("records") or []
    if records:
        rows = [[str(rec.get(c)) for c in ("kind", *columns)] for rec in records]
        lines += ["", table([f"RECORDS ({len(records)})", "VERSION", "JOB", "CREATED"], rows)]
    if latest.get("index"):
        lines += ["", f"pin: index_version {latest['index'].get('version')}"]
    return lines
