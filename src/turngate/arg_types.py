"""argparse types shared by the subcommands (``turngate.cli`` and the feature commands it adds),
here so that a feature's commands never import the command line that loads them."""

from __future__ import annotations

import argparse


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _int_at_least(text, 0)
