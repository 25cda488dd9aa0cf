"""Makes `blocked_terms` importable for its tests, as PYTHONPATH=examples/policies does for turngate."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
