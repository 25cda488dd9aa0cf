"""What a process on the embedded defaults (SQLite, no encryption) never loads: each costs
memory in every process."""

from __future__ import annotations

import subprocess
import sys

#: Imported only where needed: psycopg for a PostgreSQL ledger (about 10 MB per process),
#: cryptography for encrypted histories (about 8 MB).
NOT_ON_SQLITE = ("psycopg", "cryptography")


def test_the_api_worker_and_dev_server_on_the_defaults_load_no_driver_they_do_not_use(tmp_path) -> None:
    script = (
        "import sys\n"
        "import turngate.api.app, turngate.worker.run, turngate.devserver\n"
        "from turngate.ledger.store import LedgerStore\n"
        f"LedgerStore('sqlite:///{tmp_path.as_posix()}/ledger.db').close()\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_ON_SQLITE!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
