"""HTML (``lxml``) and EPUB (``ebooklib``) to Markdown.

HTML: the page's ``<main>`` (else its ``<article>`` elements, else its ``<body>``) with the boilerplate elements
(scripts, styles, navigation, headers, footers, asides, forms) removed; ``h1``-``h6`` become headings, lists ``-``
items, tables Markdown tables, everything else paragraphs in document order. EPUB: the spine's documents in
reading order, each one region (``chapter N``), each converted as HTML after
:func:`hxd2_ray.ingest.containers.open_zip` has bounded the book's unpacked size.
"""

from __future__ import annotations

import io
from typing import Any

from hxd2_ray.ingest.containers import expect_kind, open_zip
from hxd2_ray.ingest.conversion import Bounds, Converted, MarkdownBuilder, Rejected

BOILERPLATE = (
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "svg",
    "button", "select", "head",
)  # fmt: skip
HEADINGS = {f"h{i}": i for i in range(1, 7)}
BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "blockquote", "pre", "ul", "ol", "li", "table", "dl", "dt", "dd",
     "figure", "figcaption", "hr", "br", "body", "html", "tr", "td", "th", "thead", "tbody", "tfoot", "caption",
     *HEADINGS}
)  # fmt: skip


def convert_html(data: bytes, bounds: Bounds) -> Converted:
    expect_kind(data, "html")
    out = MarkdownBuilder()
    title = _html_into(data, out, bounds)
    if not out.build().text:
        raise Rejected("empty", "no text in the page once navigation, scripts and styles are left out")
    return out.build(title=title, pages=1)


def convert_epub(data: bytes, bounds: Bounds) -> Converted:
    open_zip(data, "epub", bounds).close()
    from ebooklib import ITEM_DOCUMENT, epub

    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    except Exception as exc:
        raise Rejected("corrupt", f"not a readable .epub ({type(exc).__name__}: {str(exc)[:200]})") from exc
    documents = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is not None and item.get_type() == ITEM_DOCUMENT:
            documents.append(item)
    bounds.check_pages(len(documents), "chapter")
    out = MarkdownBuilder()
    for number, item in enumerate(documents, 1):
        bounds.check_time(f"chapter {number} of {len(documents)}")
        out.region(f"chapter {number}")
        _html_into(item.get_content(), out, bounds)
    titles = book.get_metadata("DC", "title")
    title = str(titles[0][0]).strip() if titles else ""
    return out.build(title=title, pages=len(documents))


def _html_into(data: bytes, out: MarkdownBuilder, bounds: Bounds) -> str:
    """Add the page's content to ``out``; return its ``<title>``."""
    import lxml.html

    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise Rejected("type_mismatch", "binary content (NUL bytes), not HTML")
    try:
        data.decode("utf-8")
        encoding: str | None = "utf-8"
    except UnicodeDecodeError:
        encoding = None  # lxml reads the page's own <meta charset>
    parser = lxml.html.HTMLParser(encoding=encoding, remove_comments=True, remove_pis=True)
    try:
        root = lxml.html.document_fromstring(data, parser=parser)
    except (ValueError, TypeError) as exc:  # lxml's ParserError is a ValueError
        raise Rejected("corrupt", f"not readable as HTML: {exc}") from exc
    title_el = root.find(".//title")
    title = " ".join((title_el.text_content() if title_el is not None else "").split())
    for el in list(root.iter(*BOILERPLATE)):
        # A page's header and footer are its site's; an article's own header holds its title: kept.
        inside = any(a.tag in ("main", "article") for a in el.iterancestors())
        if el.getparent() is not None and not (inside and el.tag in ("header", "footer")):
            el.drop_tree()
    main = root.find(".//main")
    body = root.find("body")
    parts = [main] if main is not None else (root.findall(".//article") or [body if body is not None else root])
    for part in parts:
        _walk(part, out)
    return title


def _walk(el: Any, out: MarkdownBuilder) -> None:
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag in HEADINGS:
        out.heading(HEADINGS[tag], el.text_content())
        return
    if tag == "table":
        out.table([[_inline(c) for c in tr if c.tag in ("td", "th")] for tr in _rows(el)])
        return
    if tag == "pre":
        out.block(el.text_content())
        return
    if tag in ("ul", "ol"):
        for li in el:
            if li.tag == "li":
                _list_item(li, out)
        return
    run: list[str] = [el.text or ""]
    for child in el:
        ctag = child.tag if isinstance(child.tag, str) else ""
        if ctag in BLOCKS:
            _flush(run, out)
            _walk(child, out)
            run = [child.tail or ""]
        else:
            run += [child.text_content(), child.tail or ""]
    _flush(run, out)


def _list_item(li: Any, out: MarkdownBuilder) -> None:
    nested = [c for c in li if c.tag in ("ul", "ol", "table", "pre")]
    text = (li.text or "") + "".join(
        (c.text_content() if c not in nested else "") + (c.tail or "") for c in li
    )  # fmt: skip
    text = " ".join(text.split())
    if text:
        out.block(f"- {text}")
    for c in nested:
        _walk(c, out)


def _rows(table: Any) -> list[Any]:
    """The table's own rows (those of a table nested in a cell are left to that cell's text)."""
    rows = []
    for child in table:
        if child.tag == "tr":
            rows.append(child)
        elif child.tag in ("thead", "tbody", "tfoot"):
            rows.extend(r for r in child if r.tag == "tr")
    return rows


def _inline(el: Any) -> str:
    return " ".join(el.text_content().split())


def _flush(run: list[str], out: MarkdownBuilder) -> None:
    text = " ".join("".join(run).split())
    if text:
        out.block(text)
