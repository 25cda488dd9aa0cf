"""The import contracts of pyproject.toml (docs/LAYERS.md): they hold on the source tree, and they
catch the imports they forbid (checked on a copy of the tree with such imports added)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACT_IDS = (
    "core-pure",
    "workflows-no-activities",
    "workflows-no-io",
    "api-imported-by-entry-points-only",
    "jobs-domain-light",
    "jobs-layers",
    "layers",
)


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_source_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT / "src", ROOT / "pyproject.toml")

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACT_IDS)} kept, 0 broken." in result.stdout


def test_each_contract_catches_what_it_forbids(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "turngate", src / "turngate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    added = {
        "core/canonical.py": "import temporalio.workflow\n",  # core-pure
        "workflows/redaction.py": "import turngate.activities.ledger\n",  # workflows-no-activities
        "jobs/workflows.py": "import turngate.jobs.activities\nimport sqlalchemy\n",  # and workflows-no-io
        "ledger/errors.py": "import turngate.api.error_responses\n",  # api-only-by-entry-points, layers
        "jobs/domain/models.py": "import numpy\n",  # jobs-domain-light
        "jobs/cases/chunks_extra.py": "import turngate.jobs.control\n",  # jobs-layers: cases below control
    }
    for path, line in added.items():
        module = src / "turngate" / path
        module.write_text((module.read_text() if module.exists() else "") + line)

    result = lint_imports(src, tmp_path / "pyproject.toml")

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"Contracts: 0 kept, {len(CONTRACT_IDS)} broken." in result.stdout, result.stdout
