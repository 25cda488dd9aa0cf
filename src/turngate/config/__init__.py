"""Packaged default configuration files (read with importlib.resources)."""
