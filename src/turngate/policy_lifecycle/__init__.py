"""A policy's life: what-if over the recorded history, the policies that decided it, shadows."""
