"""Governed spend around the deterministic core: the models file, budget commands and metrics."""
