"""The parameters of a case index, without numpy (the API validates job intents with them; the
index itself is in turngate.jobs.cases.index)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

FTS_TOKENIZER = "unicode61 remove_diacritics 2"


class IndexParams(BaseModel):
    """Everything besides the chunks and embeddings that shapes rankings (part of the version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokenizer: str = FTS_TOKENIZER
    lexical_weight: float = Field(default=0.5, ge=0, le=1)
    vector_weight: float = Field(default=0.5, ge=0, le=1)
    candidate_k: int = Field(default=50, ge=1, le=10_000)  # per method, before fusion
    chunker: dict[str, object] = Field(default_factory=dict)  # the ChunkParams the chunks came from
