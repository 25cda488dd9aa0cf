"""Review policies the review tests load by module path (``tests.reviews.policies:NAME``)."""

from turngate.policies.review_keywords import ReviewKeywordsPolicy

#: "refund" goes to review; anyone with the review role may decide.
REVIEW = ReviewKeywordsPolicy(("refund",), four_eyes=False, deadline_s=3600)
#: The same under four-eyes: the intent's own caller may not decide.
FOUR_EYES = ReviewKeywordsPolicy(("refund",), four_eyes=True, deadline_s=3600)
#: A deadline that passes while a test waits.
SHORT = ReviewKeywordsPolicy(("refund",), four_eyes=False, deadline_s=1)
