"""Token estimators for the prompt budget (the prompt-assembly pipeline's token budget).

* ``chars/3`` (default): ``ceil(len(text) / 3)``, the seed's heuristic (~3 characters per token,
  right for Lithuanian, conservative for English). It is the same function as
  :func:`turngate.core.assembly.chars_div_3`.
* ``tiktoken:<encoding>`` (``cl100k_base`` or ``o200k_base``): exact counts with OpenAI's BPE,
  only when the ``tiktoken`` package is installed **and** the encoding file is already on this
  machine. turngate never downloads: it looks for the file itself (``TIKTOKEN_CACHE_DIR``,
  ``DATA_GYM_CACHE_DIR``, tiktoken's default cache directories, under tiktoken's cache key or as
  ``<encoding>.tiktoken``), checks its published sha256, parses it and builds the encoding from
  it, so tiktoken's own download code never runs. Otherwise it falls back to ``chars/3`` and
  logs one warning saying why.

:func:`resolve_estimator` tells which estimator is actually in effect (record that, not the
requested name); :func:`get_estimator` returns just the function.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from turngate.core.assembly import chars_div_3

__all__ = [
    "DEFAULT_ESTIMATOR",
    "EstimatorError",
    "TokenEstimator",
    "chars_div_3",
    "get_estimator",
    "resolve_estimator",
]

log = logging.getLogger("turngate.estimators")

DEFAULT_ESTIMATOR = "chars/3"
TIKTOKEN_PREFIX = "tiktoken:"
_ENCODING_NAME = re.compile(r"^[a-z0-9_]{1,64}$")
_BLOB_BASE = "https://openaipublic.blob.core.windows.net/encodings/"


@dataclass(frozen=True)
class _EncodingInfo:
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
ENCODINGS: dict[str, _EncodingInfo] = {
    "cl100k_base": _EncodingInfo(
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
    "o200k_base": _EncodingInfo(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}


class EstimatorError(ValueError):
    """An estimator name that is not understood at all (a configuration error)."""

    reason_code = "estimator.unknown"


@dataclass(frozen=True)
class TokenEstimator:
    """The estimator in effect: ``name`` is what counts, ``requested`` what was configured."""

    requested: str
    name: str
    count: Callable[[str], int]
    fallback_reason: str | None = None

    def __call__(self, text: str) -> int:
        return self.count(text)


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

    Raises :class:`EstimatorError` for a name of neither form.
    """
    if name == DEFAULT_ESTIMATOR:
        return TokenEstimator(name, DEFAULT_ESTIMATOR, chars_div_3)
    if name.startswith(TIKTOKEN_PREFIX):
        encoding = name[len(TIKTOKEN_PREFIX) :]
        if not _ENCODING_NAME.match(encoding):
            raise EstimatorError(f"invalid tiktoken encoding name in {name!r}")
        return _tiktoken(name, encoding)
    raise EstimatorError(
        f"unknown token estimator {name!r}; use {DEFAULT_ESTIMATOR!r} or 'tiktoken:<encoding>'"
    )


def get_estimator(name: str = DEFAULT_ESTIMATOR) -> Callable[[str], int]:
    """The counting function for ``name`` (see :func:`resolve_estimator`)."""
    return resolve_estimator(name).count
