"""The example policy in examples/policies: its own tests pass, and it runs in a what-if."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.policy_lifecycle.conftest import REPO, run_turngate

EXAMPLE = REPO / "examples" / "policies"


def test_the_example_policy_tests_pass() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout


async def test_the_example_policy_in_a_whatif(thread_ledger) -> None:
    done = run_turngate(
        "policy", "whatif", "--module", "blocked_terms", "--json", "--ledger-url",
        thread_ledger.effective_ledger_url, PYTHONPATH=f"{REPO}:{EXAMPLE}",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # same decisions, other reason codes
    report = json.loads(done.stdout)
    assert report["checked"] == 7
    assert {flip["change"] for flip in report["flipped"]} == {"reasons"}
    assert report["by_reason"] == {"example.no_blocked_term": 7}
