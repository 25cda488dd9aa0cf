"""Configuration is read in one place: every variable of `Settings` is documented, the context
and workbench overrides reach their configs through it, and the command line and the worker do
not read the environment themselves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from turngate.security.workbench import workbench_config
from turngate.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "turngate"
ENV_READ = re.compile(r"os\.environ\s*(\.get|\.setdefault|\.pop|\[)|os\.getenv|in os\.environ")


def _variables() -> list[str]:
    names: list[str] = []
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        names += [str(choice) for choice in getattr(alias, "choices", [])]
    return names


def test_every_variable_is_documented() -> None:
    documented = (REPO / "docs" / "CONFIGURATION.md").read_text()
    missing = [name for name in _variables() if f"`{name}`" not in documented]
    assert not missing, f"not in docs/CONFIGURATION.md: {missing}"


def test_context_and_workbench_overrides_come_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        TURNGATE_DATA_DIR=tmp_path,
        TURNGATE_CONTEXT_MAX_REFS="7",
        TURNGATE_CONTEXT_ENFORCE_SCOPE_BOUND="0",
        ALLOW_HANDLE_CONTENT_FETCH="true",
        WORKBENCH_ADMIT_KINDS="note, memo",
        WORKBENCH_AUTH_BEARER_TOKEN="wb-secret",
        WORKBENCH_FETCH_TIMEOUT_MS="500",
    )
    config = settings.context_config()
    assert config.context.max_refs == 7 and config.context.enforce_scope_bound is False
    workbench = workbench_config(settings)
    assert workbench.enabled and workbench.admit_kinds == ("note", "memo") and workbench.timeout_ms == 500
    assert workbench.bearer_token is not None and workbench.bearer_token.get_secret_value() == "wb-secret"
    assert settings.public_view()["workbench_bearer_token"] == "<set>"
    defaults = Settings(TURNGATE_DATA_DIR=tmp_path)
    assert not workbench_config(defaults).enabled
    assert defaults.context_config().context.max_refs != 7


def test_a_bad_value_names_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="TURNGATE_WORKER_PROCESSES"):
        Settings(TURNGATE_DATA_DIR=tmp_path, TURNGATE_WORKER_PROCESSES="-1")


@pytest.mark.parametrize(
    "module",
    [
        "cli.py",
        "chat_command.py",
        "devserver.py",
        "setup_cli.py",
        "worker",
        "audit",
        "api",
        "policy_lifecycle",
        "jobs/cli",
        "jobs/routes.py",
        "spend",
        "ledger/store.py",
        "ledger/engine.py",
    ],
)
def test_the_environment_is_read_only_through_settings(module: str) -> None:
    path = SRC / module
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    readers = [
        f"{f.relative_to(SRC)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if ENV_READ.search(line)
    ]
    assert not readers, readers
