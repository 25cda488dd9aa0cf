"""Prompt packs on disk: the loader that reads them (the one file-reading part of prompts).

The models and everything deterministic live in :mod:`turngate.core.prompts`.
"""

from turngate.prompts.loader import (
    PROFILES_FILE,
    PROMPTS_DIR_ENV,
    load_pack_layers,
    load_prompt_config,
    load_snapshot,
)

__all__ = ["PROFILES_FILE", "PROMPTS_DIR_ENV", "load_pack_layers", "load_prompt_config", "load_snapshot"]
