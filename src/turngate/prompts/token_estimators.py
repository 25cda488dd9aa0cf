"""Load token estimators once, at worker start (the prompt-assembly pipeline's token budget).

The names are defined in :mod:`turngate.core.estimators`. ``chars/3`` needs nothing;
``tiktoken:<encoding>`` (``cl100k_base`` or ``o200k_base``) gives exact counts with OpenAI's BPE,
only when the ``tiktoken`` package is installed **and** the encoding file is already on this
machine. turngate never downloads: it looks for the file itself (``TIKTOKEN_CACHE_DIR``,
``DATA_GYM_CACHE_DIR``, tiktoken's default cache directories, under tiktoken's cache key or as
``<encoding>.tiktoken``), checks its published sha256, parses it and builds the encoding from it,
so tiktoken's own download code never runs. Otherwise it falls back to ``chars/3`` and logs one
warning saying why.

:func:`resolve_estimator` (I/O: finds, hashes and parses the file) tells which estimator is
actually in effect (record that, not the requested name) and remembers it for this process.
Workflow code calls :func:`loaded_estimator` with the recorded name: a lookup, no I/O, so a turn
never reads or hashes the file and counts exactly as the worker that recorded the name did.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from turngate.core.estimators import (
    CHARS_DIV_3,
    DEFAULT_ESTIMATOR,
    TIKTOKEN_PREFIX,
    EstimatorError,
    TokenEstimator,
    chars_div_3,
    tiktoken_encoding,
)

__all__ = [
    "ENCODINGS",
    "EncodingInfo",
    "get_estimator",
    "loaded_estimator",
    "resolve_estimator",
]

log = logging.getLogger("turngate.estimators")

_BLOB_BASE = "https://openaipublic.blob.core.windows.net/encodings/"


@dataclass(frozen=True)
class EncodingInfo:
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Published in tiktoken_ext.openai_public (file hash, split pattern, special tokens).
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
ENCODINGS: dict[str, EncodingInfo] = {
    "cl100k_base": EncodingInfo(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str="|".join(
            [
                r"""'(?i:[sdmt]|ll|ve|re)""",
                r"""[^\r\n\p{L}\p{N}]?\p{L}+""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": EncodingInfo(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}


# Estimators resolved in this process, by the name in effect (what the worker records).
_LOADED: dict[str, TokenEstimator] = {DEFAULT_ESTIMATOR: CHARS_DIV_3}


def _cache_dirs() -> list[Path]:
    dirs: list[Path] = []
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        value = os.environ.get(variable)
        if value:
            dirs.append(Path(value))
    xdg = os.environ.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg) if xdg else Path.home() / ".cache") / "tiktoken")
    dirs.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    return dirs


def _file_names(encoding: str) -> list[str]:
    # tiktoken caches a blob under sha1(blob url); releases used two url spellings.
    urls = [f"{_BLOB_BASE}{encoding}.tiktoken", f"az://openaipublic/encodings/{encoding}.tiktoken"]
    return [hashlib.sha1(url.encode()).hexdigest() for url in urls] + [f"{encoding}.tiktoken"]


def _find_encoding_file(encoding: str, expected_sha256: str) -> tuple[Path | None, str]:
    """A local encoding file with the published hash, or (None, why not)."""
    seen_wrong: list[str] = []
    for directory in _cache_dirs():
        for name in _file_names(encoding):
            path = directory / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() == expected_sha256:
                return path, ""
            seen_wrong.append(str(path))
    if seen_wrong:
        return None, f"local file(s) {seen_wrong} do not have the published sha256"
    return None, f"no local {encoding}.tiktoken file (searched {[str(d) for d in _cache_dirs()]})"


@lru_cache(maxsize=8)
def _load_encoding(encoding: str, path: str) -> Any:
    tiktoken = importlib.import_module("tiktoken")
    info = ENCODINGS[encoding]
    ranks: dict[bytes, int] = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name=encoding, pat_str=info.pat_str, mergeable_ranks=ranks, special_tokens=info.special_tokens
    )


def _tiktoken(requested: str, encoding: str) -> TokenEstimator:
    def fallback(reason: str) -> TokenEstimator:
        log.warning("token estimator %r is unavailable (%s); using %s", requested, reason, DEFAULT_ESTIMATOR)
        return TokenEstimator(requested, DEFAULT_ESTIMATOR, chars_div_3, fallback_reason=reason)

    info = ENCODINGS.get(encoding)
    if info is None:
        return fallback(f"unknown encoding {encoding!r} (known: {sorted(ENCODINGS)})")
    if importlib.util.find_spec("tiktoken") is None:
        return fallback("the tiktoken package is not installed")
    path, why = _find_encoding_file(encoding, info.sha256)
    if path is None:
        return fallback(why)
    try:
        enc = _load_encoding(encoding, str(path))
    except Exception as exc:  # a broken install or file must not stop the worker
        return fallback(f"loading {path} failed: {type(exc).__name__}: {exc}")

    def count(text: str) -> int:
        # Special-token text in a prompt is ordinary text for counting purposes.
        return len(enc.encode(text, disallowed_special=()))

    return TokenEstimator(requested, f"{TIKTOKEN_PREFIX}{encoding}", count)


def resolve_estimator(name: str = DEFAULT_ESTIMATOR) -> TokenEstimator:
    """The estimator for ``name`` (``chars/3`` or ``tiktoken:<encoding>``), falling back to chars/3.

    Reads and checks the encoding file (call it at worker start, never from workflow code) and
    remembers the result for :func:`loaded_estimator`. Raises :class:`EstimatorError` for a name
    of neither form.
    """
    encoding = tiktoken_encoding(name)
    if encoding is None:
        return CHARS_DIV_3
    estimator = _tiktoken(name, encoding)
    _LOADED[estimator.name] = estimator
    return estimator


def loaded_estimator(name: str) -> Callable[[str], int]:
    """The counting function of an estimator already resolved in this process (no I/O).

    ``name`` is the name in effect that the worker recorded (``Boundary.token_estimator``).
    Raises :class:`EstimatorError` (``estimator.not_loaded``) when this process never resolved
    it: a worker configured with another estimator must not count this turn differently.
    """
    estimator = _LOADED.get(name)
    if estimator is None:
        raise EstimatorError(
            f"token estimator {name!r} is not loaded in this worker (loaded: {sorted(_LOADED)}); "
            "start the worker with TURNGATE_TOKEN_ESTIMATOR set to it",
            reason_code="estimator.not_loaded",
        )
    return estimator.count


def get_estimator(name: str = DEFAULT_ESTIMATOR) -> Callable[[str], int]:
    """The counting function for ``name`` (see :func:`resolve_estimator`)."""
    return resolve_estimator(name).count
