"""``open_token_bus(url)``: the bus a URL names (``settings.effective_token_bus_url``).

- ``sqlite:///<path>`` as in SQLAlchemy: ``sqlite:////abs/stream.sqlite3`` (four slashes) is
  absolute, ``sqlite:///rel/stream.sqlite3`` relative to the cwd; the default is
  ``sqlite:///<data_dir>/stream.sqlite3`` with an absolute data_dir
- ``redis://host:port/db`` (also ``rediss://`` and ``unix://``)
- ``memory://`` (a fresh in-process bus: tests); ``memory://<name>``: one bus per name and
  process, shared by everything that opens it (API and worker in one process); it is cleared
  when the last opener closes it

Query parameters tune a bus: ``ttl_s`` (all), ``flush_interval_ms`` (sqlite, redis),
``poll_interval_ms`` (sqlite), ``maxlen`` and ``key_prefix`` (redis); e.g.
``redis://cache:6379/2?ttl_s=600``.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from turngate.streaming.base import DEFAULT_TTL_S, TokenBus


class TokenBusUrlError(ValueError):
    """The token bus URL names no supported backend or has a bad option."""


def _options(query: str) -> dict[str, str]:
    return {name: values[-1] for name, values in parse_qs(query).items()}


def _number(options: dict[str, str], name: str, default: float) -> float:
    raw = options.pop(name, None)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise TokenBusUrlError(f"token bus option {name}={raw!r} is not a number") from exc


def open_token_bus(url: str) -> TokenBus:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options = _options(parts.query)
    ttl_s = _number(options, "ttl_s", DEFAULT_TTL_S)
    if scheme == "sqlite":
        from turngate.streaming.sqlite_bus import (
            DEFAULT_FLUSH_INTERVAL_S,
            DEFAULT_POLL_INTERVAL_S,
            SqliteTokenBus,
        )

        # As in SQLAlchemy: what follows "sqlite:///" is the path (absolute when it starts with "/").
        path = url.split("?", 1)[0][len("sqlite://") :]
        path = path[1:] if path.startswith("/") else path
        if not path or path == ":memory:":
            raise TokenBusUrlError("the sqlite token bus needs a file path: sqlite:///path/stream.sqlite3")
        flush = _number(options, "flush_interval_ms", DEFAULT_FLUSH_INTERVAL_S * 1000) / 1000
        poll = _number(options, "poll_interval_ms", DEFAULT_POLL_INTERVAL_S * 1000) / 1000
        _no_leftovers(options)
        return SqliteTokenBus(path, ttl_s=ttl_s, flush_interval_s=flush, poll_interval_s=poll)
    if scheme in ("redis", "rediss", "unix"):
        from turngate.streaming.redis_bus import DEFAULT_KEY_PREFIX, DEFAULT_MAXLEN, RedisTokenBus

        flush = _number(options, "flush_interval_ms", 0.0) / 1000
        maxlen = int(_number(options, "maxlen", DEFAULT_MAXLEN))
        prefix = options.pop("key_prefix", DEFAULT_KEY_PREFIX)
        base = parts._replace(query="&".join(f"{k}={v}" for k, v in options.items())).geturl()
        return RedisTokenBus(base, ttl_s=ttl_s, maxlen=maxlen, key_prefix=prefix, flush_interval_s=flush)
    if scheme == "memory":
        from turngate.streaming.memory_bus import MemoryTokenBus, shared_memory_bus

        _no_leftovers(options)
        if parts.netloc:
            return shared_memory_bus(parts.netloc, ttl_s=ttl_s)
        return MemoryTokenBus(ttl_s=ttl_s)
    raise TokenBusUrlError(
        f"unsupported token bus URL {url!r}: use sqlite:///path, redis://host:port/db or memory://"
    )


def _no_leftovers(options: dict[str, str]) -> None:
    if options:
        raise TokenBusUrlError(f"unknown token bus option(s): {', '.join(sorted(options))}")
