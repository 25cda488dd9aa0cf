"""turngate benchmark suite: `python -m bench --help`."""
