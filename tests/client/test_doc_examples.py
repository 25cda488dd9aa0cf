"""The Python examples of the docs run as written, against a real stack (a separate process each,
as a reader would run them): the OpenAI SDK's lines and turngate.client's.

The example's URL is the stack's; a key placeholder becomes ``os.environ["TURNGATE_API_KEY"]``
(set, with ``TURNGATE_URL``, like a reader's shell). What each prints is checked against the
comment the example shows.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_openai_compat import keyed_stack
from turngate.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "http://127.0.0.1:8010"
PLACEHOLDER_KEYS = ('api_key="<a turngate API key>"', 'api_key="..."')
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

#: (file, a string that names the example) -> what its output must contain
EXAMPLES = {
    ("docs/OPENAI.md", "client = OpenAI(base_url="): ["echo: hello chatcmpl-"],
    ("docs/CLIENT.md", "first = tg.chat("): ["echo: What is two plus two? ['policy.allow_all']", "True"],
    ("docs/CLIENT.md", "except TurngateError"): ["422 admission.missing_field"],
    ("README.md", "from openai import OpenAI"): ["echo: hello chatcmpl-"],
    ("README.md", "with Turngate() as tg"): ["echo: hello ['policy.allow_all'] True"],
}


def example(doc: str, marker: str) -> str:
    blocks = [b for b in PYTHON_BLOCK.findall((ROOT / doc).read_text()) if marker in b]
    assert blocks, f"{doc} has no Python example with {marker!r}"
    code = blocks[0]
    for placeholder in PLACEHOLDER_KEYS:
        code = code.replace(placeholder, 'api_key=os.environ["TURNGATE_API_KEY"]')
    return "import os\n" + code


@pytest.mark.parametrize(("doc", "marker"), list(EXAMPLES), ids=[f"{d}:{m}" for d, m in EXAMPLES])
async def test_the_example_runs_as_written(settings: Settings, doc: str, marker: str) -> None:
    async with keyed_stack(settings) as stack:
        url = str(stack.http.base_url).rstrip("/")
        key = stack.http.headers["Authorization"].removeprefix("Bearer ")
        code = example(doc, marker).replace(DOC_URL, url)
        env = {**os.environ, "TURNGATE_URL": url, "TURNGATE_API_KEY": key}
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr
    for expected in EXAMPLES[(doc, marker)]:
        assert expected in done.stdout, (code, done.stdout)
