"""`turngate chat` names each declared external ref and what reached the model."""

from __future__ import annotations

from turngate.chat_command import external_context_lines


def test_one_line_per_external_ref() -> None:
    records = [
        {
            "ref_type": "case_query",
            "case_id": "handbook",
            "retrieval_query": "parental leave",
            "selected_chunk_ids": ["sha256:a", "sha256:b"],
            "index_version": "sha256:v1",
        },
        {"ref_type": "artifact.handle", "handle_id": "h-1", "content_sha256": "sha256:c"},
        {"ref_type": "artifact.handle", "handle_id": "h-2", "reason_code": "workbench.too_large"},
    ]
    assert external_context_lines(records) == [
        "-- case_query handbook 'parental leave': 2 chunk(s) from index sha256:v1",
        "-- artifact.handle h-1: fetched sha256:c",
        "-- artifact.handle h-2: workbench.too_large",
    ]
    assert external_context_lines([]) == []
