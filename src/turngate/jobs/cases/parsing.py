"""Document bytes -> plain text, one parser per media type.

Parsing is deterministic (same bytes, same text) because chunk ids are digests of what comes out.
PDF goes through ``pypdf`` (pure Python, maintained); HTML through the stdlib parser (scripts and
styles dropped, block elements become line breaks); Markdown through ``markdown-it-py`` (the
CommonMark parser already in the environment), keeping the words and dropping the markup.
"""

from __future__ import annotations

import io
import re
import unicodedata
from html.parser import HTMLParser

MEDIA_TYPES = ("text/plain", "text/markdown", "text/html", "application/pdf")
_BY_SUFFIX = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}


class DocumentParseError(ValueError):
    """The bytes are not a readable document of the declared type (never retried)."""

    code = "job.document_unreadable"


def guess_media_type(name: str, data: bytes | None = None) -> str:
    """The media type from a file name's suffix, else from the leading bytes, else text/plain."""
    lower = name.lower()
    for suffix, media_type in _BY_SUFFIX.items():
        if lower.endswith(suffix):
            return media_type
    if data is not None:
        head = data[:512].lstrip().lower()
        if head.startswith(b"%pdf-"):
            return "application/pdf"
        if head.startswith((b"<!doctype html", b"<html")):
            return "text/html"
    return "text/plain"


def parse_document(data: bytes, media_type: str) -> str:
    """The normalised plain text of a document."""
    kind = media_type.split(";")[0].strip().lower()
    if kind == "application/pdf":
        text = _pdf_text(data)
    else:
        decoded = _decode(data)
        if kind == "text/html":
            text = _html_text(decoded)
        elif kind == "text/markdown":
            text = _markdown_text(decoded)
        elif kind == "text/plain":
            text = decoded
        else:
            raise DocumentParseError(f"unsupported media type {media_type!r}; use one of {MEDIA_TYPES}")
    return normalize_text(text)


def normalize_text(text: str) -> str:
    """NFC, ``\\n`` line ends, no trailing spaces, at most one blank line in a row."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x00", "")
    lines = [re.sub(r"[ \t\f\v]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentParseError(f"text document is not UTF-8: {exc}") from None


def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise DocumentParseError(f"unreadable PDF: {exc}") from None
    return "\n\n".join(pages)


_BLOCK_TAGS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "td",
        "th",
        "tr",
        "ul",
    ]
)
_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "head"})


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(markup: str) -> str:
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


def _markdown_text(source: str) -> str:
    from markdown_it import MarkdownIt

    out: list[str] = []
    for token in MarkdownIt("commonmark").parse(source):
        if token.type == "inline":
            out.append("".join(_inline_text(child) for child in token.children or []))
        elif token.type in ("fence", "code_block"):
            out.append(token.content.rstrip("\n"))
        elif token.type.endswith("_close") and token.block:
            out.append("\n")
    return "\n".join(out)


def _inline_text(token: object) -> str:
    kind = getattr(token, "type", "")
    if kind in ("softbreak", "hardbreak"):
        return "\n"
    if kind in ("text", "code_inline"):
        return str(getattr(token, "content", ""))
    if kind == "image":
        return "".join(_inline_text(child) for child in getattr(token, "children", None) or [])
    return ""
