"""A layer builder that raises on request (``inputs.explode``), named by the fault tests' packs as
``tests.faults.fragile_builder:fragile``; plus the allow-all policy, which the worker uses as its
policy module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.policies.allow_all import POLICY

__all__ = ["POLICY", "fragile"]


def fragile(inputs: Mapping[str, Any], params: Mapping[str, Any], runtime: Any) -> str:
    if inputs.get("explode"):
        raise RuntimeError("the fragile builder broke on purpose")
    return "FRAGILE LAYER"
