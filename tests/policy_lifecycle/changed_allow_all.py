"""allow_all's id and version with another configuration: a changed policy that kept its version."""

from __future__ import annotations

from typing import Any

from turngate.policies.allow_all import AllowAllPolicy


class ChangedAllowAll(AllowAllPolicy):
    def config(self) -> dict[str, Any]:
        return {"changed": True}


POLICY = ChangedAllowAll()
