"""The allow-all policy plus a layer builder that raises on request (``inputs.explode``):
imported by a worker as its policy module, which registers the builder before profiles load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.core.prompts import register_builder
from turngate.policies.allow_all import POLICY

__all__ = ["POLICY"]


def _fragile(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: Any) -> str:
    if inputs.get("explode"):
        raise RuntimeError("the fragile builder broke on purpose")
    return "FRAGILE LAYER"


register_builder("fragile", _fragile, replace=True)
