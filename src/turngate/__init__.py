"""turngate: a deterministic, durable boundary in front of LLM calls."""

__version__ = "0.1.0"
