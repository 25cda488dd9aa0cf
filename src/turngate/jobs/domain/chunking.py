"""Deterministic chunking: text -> overlapping windows cut at paragraph, line or word breaks.

A chunk is stored as the canonical JSON of :class:`Chunk`; its id is the sha256 of those bytes,
so the id *is* the artifact id, and the same document chunked with the same parameters always
gives the same ids (the tests check this with hypothesis).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turngate.core.canonical import canonical_bytes, digest_bytes

CHUNKER_VERSION = "chars-breaks/1"
CHUNK_KIND = "case-chunk"
_BREAKS = ("\n\n", "\n", ". ", " ")


class ChunkParams(BaseModel):
    """Window size and overlap in characters (part of every ``index_version``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(default=1000, ge=50, le=100_000)
    overlap: int = Field(default=100, ge=0)
    version: str = CHUNKER_VERSION

    @model_validator(mode="after")
    def _overlap_below_half(self) -> ChunkParams:
        if self.overlap * 2 > self.size:
            raise ValueError("overlap must be at most half the chunk size")
        return self


class Chunk(BaseModel):
    """One stored chunk: where it comes from and its text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    document: str  # sha256 of the source document's bytes
    ordinal: int
    start: int  # character offsets into the parsed text
    end: int
    text: str

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.model_dump())

    @property
    def chunk_id(self) -> str:
        return digest_bytes(self.to_bytes())


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int


def split_spans(text: str, params: ChunkParams) -> list[Span]:
    """Windows of at most ``params.size`` characters covering ``text``, each cut at the latest
    paragraph/line/sentence/word break in its second half, the next one starting ``overlap``
    characters before the cut."""
    spans: list[Span] = []
    n = len(text)
    start = 0
    while start < n:
        end = min(start + params.size, n)
        if end < n:
            floor = start + params.size // 2
            for brk in _BREAKS:
                at = text.rfind(brk, floor, end)
                if at != -1:
                    end = at + len(brk)
                    break
        spans.append(Span(start, end))
        if end >= n:
            break
        start = max(end - params.overlap, start + 1)
    return spans


def chunk_text(text: str, document_sha256: str, params: ChunkParams) -> list[Chunk]:
    """The chunks of one parsed document (whitespace-only windows are dropped)."""
    chunks: list[Chunk] = []
    for span in split_spans(text, params):
        piece = text[span.start : span.end]
        if not piece.strip():
            continue
        chunks.append(
            Chunk(document=document_sha256, ordinal=len(chunks), start=span.start, end=span.end, text=piece)
        )
    return chunks
