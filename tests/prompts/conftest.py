"""Fixtures for the prompt-system tests: small prompt packs written to tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.prompts.helpers import BASIC_FILES, write_pack


@pytest.fixture
def make_pack(tmp_path: Path) -> Callable[..., Path]:
    def make(files: dict[str, str] | None = None, config: dict[str, Any] | None = None) -> Path:
        return write_pack(tmp_path / "prompts", BASIC_FILES if files is None else files, config)

    return make
