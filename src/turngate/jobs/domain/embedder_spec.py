"""Which embedder a job uses: the spec alone, without numpy (the API validates job intents with
it; the embedders themselves, in turngate.jobs.cases.embedders, are only needed by the job worker)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

OFFLINE_VERSION = "hash-ngrams/1"


class EmbedderSpec(BaseModel):
    """Which embedder a job uses. No secrets: keys come from the worker's environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["offline", "openai", "ollama"] = "offline"
    model: str = OFFLINE_VERSION
    dim: int | None = Field(default=256, ge=8, le=8192)  # offline: buckets; openai: `dimensions`
    base_url: str | None = None  # openai: base URL; ollama: host (else the SDK's env defaults)
    batch_size: int = Field(default=64, ge=1, le=2048)
    timeout_s: float = Field(default=60.0, gt=0)

    @property
    def embedder_id(self) -> str:
        """What an embedding depends on (never the URL: one model behind two URLs is one model)."""
        suffix = f"/dim={self.dim}" if self.dim and self.kind != "ollama" else ""
        return f"{self.kind}:{self.model}{suffix}"
