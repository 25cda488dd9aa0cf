"""Layer builders in an importable module, named in test packs as ``tests.prompts.module_builders:<fn>``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.core.layer_builders import BuildRuntime

NOT_A_FUNCTION = "a string"


def broken(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime) -> str:
    raise KeyError("boom")


def greeting(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: BuildRuntime) -> str:
    return f"## Greeting\nHello from {runtime.provider}."
