"""Human review of turns the policy sent to review (docs/REVIEWS.md): API routes, CLI, metrics."""
