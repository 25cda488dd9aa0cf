"""Prompt packs on disk: reading a pack (``loader``), loading its layer builders
(``pack_builders``) and its token estimator (``token_estimators``), pinning snapshots (``pins``).

This is the I/O side of prompt assembly, run at worker start or in activities. The models and
everything deterministic live in :mod:`turngate.core.prompt_layers` and
:mod:`turngate.core.layer_builders`.
"""

from turngate.prompts.loader import (
    PROFILES_FILE,
    PROMPTS_DIR_ENV,
    load_pack_layers,
    load_prompt_config,
    load_snapshot,
)

__all__ = ["PROFILES_FILE", "PROMPTS_DIR_ENV", "load_pack_layers", "load_prompt_config", "load_snapshot"]
