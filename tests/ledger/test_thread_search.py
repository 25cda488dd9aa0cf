"""The thread-id search (``q``): the trigram index narrows it, the exact condition decides.

Whatever path a search takes (the index's candidates, or the recency walk for a string too short
for trigrams or too common to be worth it), it selects exactly the threads whose id contains
``q`` as the backend's LIKE says: ASCII case folded on SQLite, case-sensitive on PostgreSQL.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator

import pytest
from sqlalchemy import event, text

from tests.ledger.postgres import PostgresServer, admin_connection
from tests.ledger.summaries import recompute, stored, turn_drafts
from turngate.ledger import LedgerStore
from turngate.ledger.thread_list import ThreadFilter, list_threads

#: (tenant, thread id): multibyte ids, case twins, LIKE wildcards and a quote in ids.
THREADS = [
    ("acme", "order-ÄÖÜ-7"),
    ("acme", "order-äöü-8"),
    ("acme", "Plain-ABC"),
    ("acme", "plain-abc-2"),
    (None, 'say-"hi"-now'),
    (None, "per%cent-abc"),
    (None, "under_score-abc"),
    ("globex", "plain-abc-3"),
    ("globex", "日本語のスレッド"),
    ("globex", "日本"),
]

SEARCH = "thread_search"
_ASCII_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


@pytest.fixture
def searchable(store: LedgerStore) -> LedgerStore:
    for n, (tenant, thread) in enumerate(THREADS):
        store.append_many(turn_drafts(n, thread=thread, tenant=tenant))
        store.append_many(turn_drafts(100 + n, thread=thread, tenant=tenant))  # a known thread again
    return store


def _expected(store: LedgerStore, tenant: str | None, q: str) -> list[str]:
    """Thread keys whose id contains ``q`` as the backend's LIKE says, newest first."""
    if store.dialect == "sqlite":
        contains = lambda thread: q.translate(_ASCII_FOLD) in thread.translate(_ASCII_FOLD)  # noqa: E731
    else:
        contains = lambda thread: q in thread  # noqa: E731
    rows = recompute(store)["threads"]
    keys = [k for k in rows if contains(k[1]) and (tenant is None or k[0] == tenant)]
    return [f"{t}/{th}" for t, th in sorted(keys, key=lambda k: -rows[k]["last_index"])]


@pytest.fixture
def statements(store: LedgerStore) -> Iterator[list[str]]:
    seen: list[str] = []

    def keep(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", keep)
    yield seen
    event.remove(store.engine, "before_cursor_execute", keep)


def _search(store: LedgerStore, tenant: str | None, q: str, seen: list[str]) -> tuple[list[str], int]:
    """The listed thread keys and the path taken: 0 (the index not asked), 1 (asked; too many
    candidates: the recency walk), 2 (the page read from the candidates, which the index gave
    once: later statements carry them as a VALUES list)."""
    seen.clear()
    with store.read_connection() as conn:
        page = list_threads(conn, ThreadFilter(tenant, q=q), limit=100)
    assert page.total == len(page.threads) and page.total_exact
    index_reads = sum(statement.startswith("SELECT thread_search.") for statement in seen)
    assert index_reads <= 1, seen
    from_candidates = any("candidates" in statement for statement in seen)
    path = 2 if from_candidates else index_reads
    return [f"{row.tenant_id or ''}/{row.thread_id}" for row in page.threads], path


@pytest.mark.parametrize(
    ("tenant", "q", "index_reads"),
    [
        (None, "ab", 0),  # two characters: no trigram, the walk
        (None, "abc", 2),  # three: the index
        ("acme", "abc", 2),
        (None, "ABC", 2),  # case: as LIKE on each backend
        (None, "öü", 0),  # two characters in four bytes: still too short
        (None, "äöü", 2),  # three in six bytes; SQLite's index folds Ä, its LIKE does not
        (None, "日本", 0),  # two characters in six bytes
        (None, "日本語", 2),
        (None, '"hi"', 2),  # a quote in an FTS5 phrase
        (None, "%ce", 2),  # LIKE wildcards are literal
        (None, "r_s", 2),
        (None, "e_s", 2),  # "_" is literal: matches nothing ("under_score" has "r_s")
        (None, "zzz", 2),
    ],
)
def test_a_search_selects_what_like_selects(
    searchable: LedgerStore, statements: list[str], tenant: str | None, q: str, index_reads: int
) -> None:
    found, reads = _search(searchable, tenant, q, statements)
    assert found == _expected(searchable, tenant, q)
    assert reads == index_reads
    assert stored(searchable) == recompute(searchable)


def test_too_many_candidates_walk_the_recency_index_with_the_same_answer(
    searchable: LedgerStore, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At, just over and just under the candidate cap: the same threads either way."""
    from turngate.ledger import thread_list

    expected = _expected(searchable, None, "abc")
    candidates = len(expected)  # the index's candidates for "abc" are exactly the matches here
    assert candidates >= 4
    for cap, reads in ((candidates + 1, 2), (candidates, 2), (candidates - 1, 1)):
        monkeypatch.setattr(thread_list, "SEARCH_CANDIDATES_MAX", cap)
        found, index_reads = _search(searchable, None, "abc", statements)
        assert found == expected and index_reads == reads, cap


@pytest.mark.backends("postgresql", reason="pg_trgm is a PostgreSQL extension")
def test_without_pg_trgm_the_search_still_answers_and_says_why(
    postgres_server: PostgresServer, app_role: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may not create extensions migrates a database without pg_trgm: the search
    table has no trigram index, a warning says why and how to add it, searches answer the same."""
    name = app_role
    with admin_connection(postgres_server.admin_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # owned by the admin: no CREATE for the role
    try:
        with admin_connection(postgres_server.admin_url.set(database=name)) as conn:
            conn.execute(f'GRANT CREATE ON SCHEMA public TO "{name}"')
        url = postgres_server.admin_url.set(database=name, username=name, password=None)
        with (
            caplog.at_level(logging.WARNING, logger="turngate.ledger"),
            LedgerStore(url.render_as_string(hide_password=False)) as store,
        ):
            for n, (tenant, thread) in enumerate(THREADS):
                store.append_many(turn_drafts(n, thread=thread, tenant=tenant))
            with store.read_connection() as conn:
                indexes = conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE tablename = 'thread_search'")
                )
                assert "thread_search_trigrams" not in set(indexes.scalars())
                page = list_threads(conn, ThreadFilter(None, q="abc"), limit=100)
            assert [f"{r.tenant_id or ''}/{r.thread_id}" for r in page.threads] == _expected(
                store, None, "abc"
            )
            assert stored(store) == recompute(store)
        assert "pg_trgm is not available" in caplog.text and "permission denied" in caplog.text
    finally:
        with admin_connection(postgres_server.admin_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
