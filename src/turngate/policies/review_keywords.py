"""Send risky messages to a person first: an example of the ``REVIEW`` outcome (docs/REVIEWS.md).

A message that contains one of the configured words (case-insensitive, whole words) goes to
review: reason ``policy.review_keyword`` and a review spec (the role that may decide, the
deadline, four-eyes). Every other message is allowed (``policy.no_review_needed``). The words
and the spec are the policy's configuration, so they are pinned in every DECISION's config digest.
"""

from __future__ import annotations

import re
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput
from turngate.core.review import REVIEW_ROLE, ReviewSpec

REASON_KEYWORD = "policy.review_keyword"
REASON_CLEAR = "policy.no_review_needed"
DEFAULT_WORDS = ("refund", "delete", "transfer", "send")


class ReviewKeywordsPolicy:
    policy_id = "turngate.review_keywords"
    policy_version = "1"

    def __init__(
        self,
        words: tuple[str, ...] = DEFAULT_WORDS,
        *,
        role: str = REVIEW_ROLE,
        deadline_s: int = 24 * 3600,
        four_eyes: bool = True,
    ) -> None:
        self.words = tuple(sorted({word.lower() for word in words}))
        self.spec = ReviewSpec(role=role, deadline_s=deadline_s, four_eyes=four_eyes)
        self._pattern = re.compile(r"\b(" + "|".join(map(re.escape, self.words)) + r")\b", re.IGNORECASE)

    def config(self) -> dict[str, Any]:
        return {"words": list(self.words), "review": self.spec.model_dump(mode="json")}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        if self.words and self._pattern.search(policy_input.intent.message):
            return PolicyDecision.needs_review(REASON_KEYWORD, spec=self.spec)
        return PolicyDecision.allow(REASON_CLEAR)


POLICY = ReviewKeywordsPolicy()
