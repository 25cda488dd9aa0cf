"""Parsing (text, Markdown, HTML, PDF) and chunking: deterministic, covering, within bounds."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jobs.pdf import make_pdf
from turngate.jobs.cases.parsing import DocumentParseError, guess_media_type, parse_document
from turngate.jobs.domain.chunking import ChunkParams, chunk_text, split_spans

DOC = "sha256:" + "ab" * 32


def test_plain_text_is_normalised() -> None:
    assert parse_document(b"\xef\xbb\xbfa  b\r\n\r\n\r\n\r\nc \t\n", "text/plain") == "a b\n\nc"


def test_markdown_keeps_words_drops_markup() -> None:
    text = parse_document(
        b"# Title\n\nSome *bold* and [a link](http://x).\n\n```\ncode()\n```\n", "text/markdown"
    )
    assert text == "Title\n\nSome bold and a link.\n\ncode()"


def test_html_drops_scripts_and_styles() -> None:
    html = (
        b"<html><head><style>p{}</style></head>"
        b"<body><h1>Hi</h1><p>a &amp; b<script>x()</script></p></body></html>"
    )
    assert parse_document(html, "text/html") == "Hi\n\na & b"


def test_pdf_text_through_pypdf() -> None:
    pdf = make_pdf([["Hello PDF world", "second line (x)"], ["page two"]])
    assert parse_document(pdf, "application/pdf") == "Hello PDF world\nsecond line (x)\n\npage two"


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(b"not a pdf", "application/pdf"), (b"\xff\xfe\x00bad", "text/plain"), (b"x", "image/png")],
)
def test_unreadable_documents_are_refused(data: bytes, media_type: str) -> None:
    with pytest.raises(DocumentParseError):
        parse_document(data, media_type)


def test_media_type_guess() -> None:
    assert guess_media_type("a.MD") == "text/markdown"
    assert guess_media_type("upload", b"%PDF-1.4 ...") == "application/pdf"
    assert guess_media_type("upload", b"<!DOCTYPE html><p>") == "text/html"
    assert guess_media_type("upload", b"hello") == "text/plain"


def test_overlap_must_fit() -> None:
    with pytest.raises(ValueError):
        ChunkParams(size=100, overlap=60)


params_strategy = st.builds(
    lambda size, ratio: ChunkParams(size=size, overlap=int(size * ratio)),
    st.integers(min_value=50, max_value=400),
    st.floats(min_value=0, max_value=0.5),
)
text_strategy = st.text(alphabet=st.sampled_from("ab cd.\n\u00e9x"), max_size=3000)


@settings(max_examples=150, deadline=None)
@given(text_strategy, params_strategy)
def test_chunking_is_deterministic_bounded_and_covering(text: str, params: ChunkParams) -> None:
    first = chunk_text(text, DOC, params)
    again = chunk_text(str(text), DOC, ChunkParams(**params.model_dump()))
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    spans = split_spans(text, params)
    covered = set()
    for prev, span in itertools.pairwise(spans):
        assert prev.start < span.start <= prev.end  # advances, never leaves a gap
    for span in spans:
        assert 0 < span.end - span.start <= params.size
        covered.update(range(span.start, span.end))
    assert covered == set(range(len(text)))
    for chunk in first:
        assert chunk.text == text[chunk.start : chunk.end] and chunk.text.strip()
    assert [c.ordinal for c in first] == list(range(len(first)))


@settings(max_examples=50, deadline=None)
@given(text_strategy, params_strategy)
def test_chunk_ids_depend_on_document_and_parameters(text: str, params: ChunkParams) -> None:
    chunks = chunk_text(text, DOC, params)
    other_doc = chunk_text(text, "sha256:" + "cd" * 32, params)
    assert not {c.chunk_id for c in chunks} & {c.chunk_id for c in other_doc}
    for chunk in chunks:
        assert chunk.chunk_id.startswith("sha256:") and len(chunk.chunk_id) == 71
