"""What a turn does not need is not imported: the vendor SDKs only with their provider
configured, PyJWT only with OIDC configured, numpy not in the API (only job workers need it).
Behaviour is unchanged: the classification tests in this directory import the SDKs and check
every error class."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHECK = """
import json, sys
import turngate.api.app, turngate.worker.run
from turngate.providers.registry import build_providers
from turngate.settings import load_settings
build_providers(load_settings())
print(json.dumps(sorted(m for m in ("openai", "anthropic", "ollama", "jwt") if m in sys.modules)))
"""


def _loaded(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "OLLAMA_"))}
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env={**clean, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_api_and_worker_import_no_vendor_sdk_or_jwt_they_do_not_use() -> None:
    assert _loaded() == []


def test_the_api_alone_imports_no_numpy() -> None:
    code = "import sys, turngate.api.app; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_configured_provider_imports_its_sdk_and_only_that_one() -> None:
    assert _loaded(ANTHROPIC_API_KEY="sk-ant-test") == ["anthropic"]
    assert _loaded(OPENAI_API_KEY="sk-test") == ["openai"]


def test_sdk_errors_are_classified_whichever_module_was_imported_first() -> None:
    """The classifier looks the SDK classes up when called, so an SDK imported after it counts."""
    code = (
        "from turngate.providers.error_classification import classify_exception\n"
        "import httpx, openai\n"
        "req = httpx.Request('POST', 'http://127.0.0.1/v1')\n"
        "exc = openai.RateLimitError('slow down', response=httpx.Response(429, request=req), body=None)\n"
        "err = classify_exception(exc, vendor='openai')\n"
        "print(err.type, err.retryable)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["provider.rate_limited", "True"]
