"""Write tests/data/bad_inputs/ (one file per quarantine reason) and tests/data/hostile/ (a hostile corpus).

Run ``python tests/data/make_bad_inputs.py`` after changing this script; the output is byte-for-byte
deterministic and committed. What a repository cannot or should not hold — symbolic links (a folder loop, a
dangling link, a file-link loop), a named pipe, names with control characters or bytes that are not UTF-8,
60 nested folders and a big file — is made at test time by :func:`add_generated_hostiles`, which returns the
quarantine rows and documents those entries must give.
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
BAD_INPUTS = HERE / "bad_inputs"
HOSTILE = HERE / "hostile"

# file name -> (bytes, expected quarantine reasons in order, number of documents that still come out)
FILES: dict[str, tuple[bytes, tuple[str, ...], int]] = {
    "binary_blob.txt": (bytes(range(256)) * 4, ("binary",), 0),
    "latin1.txt": ("Café au lait, naïve résumé.\n".encode("latin-1"), ("undecodable",), 0),
    "empty.txt": (b"", ("empty",), 0),
    "blank.md": (b"  \n\t\n   \r\n", ("whitespace_only",), 0),
    "partly_bad.jsonl": (
        (
            json.dumps({"id": "good-1", "title": "Good", "text": "This line is a valid record and survives."})
            + "\n"
            + '{"id": "bad-2", "text": "unterminated\n'
        ).encode(),
        ("malformed_json",),
        1,
    ),
    "no_text.json": (
        json.dumps({"id": "x1", "title": "No text", "body": "the text is under the wrong key"}).encode(),
        ("missing_text_field",),
        0,
    ),
    # A PDF header over junk: PDFium cannot load it (issue 41: PDFs are read, a broken one is quarantined).
    "junk.pdf": (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\njunk that is not a real pdf\n", ("corrupt",), 0),
    # A legacy binary Word file: no reader for the suffix.
    "legacy.doc": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 56, ("unsupported_type",), 0),
}

_HALF_BROKEN_LINES = [
    json.dumps({"id": "hb-1", "title": "First good line", "text": "Ada Lovelace wrote the first published program."}),
    '{"id": "hb-2", "text": "cut off in the middle',
    "[1, 2, 3]",
    json.dumps({"id": "hb-4", "title": "no text field"}),
    json.dumps({"id": "hb-5", "text": "a lone surrogate \ud800 escaped as JSON allows"}),  # ensure_ascii: \ud800
    json.dumps({"id": "hb-6", "text": "   \t  "}),
    "",
    '"just a string"',
    json.dumps({"id": "hb-9", "text": 12}),
    json.dumps({"id": "hb-10", "title": "Last good line", "text": "Grace Hopper built the first compiler, A-0."}),
]

# The hostile corpus: file name -> (bytes, ((reason, detail fragment), ...), document titles that come out).
HOSTILE_FILES: dict[str, tuple[bytes, tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "utf16_le_bom.txt": (
        "\ufeffUTF-16 little-endian text with a byte order mark reads as a document.\n".encode("utf-16-le"),
        (),
        ("utf16_le_bom.txt",),
    ),
    "utf16_be_bom.md": (
        "# UTF-16 big-endian\n\nWith a byte order mark, this markdown is a document too.\n".encode("utf-16"),
        (),
        ("UTF-16 big-endian",),
    ),
    "utf16_no_bom.txt": (
        "Without a byte order mark UTF-16 is full of NUL bytes.\n".encode("utf-16-le"),
        (("binary", "NUL byte at offset 1"),),
        (),
    ),
    "nul_in_text.md": (
        b"# Looks like text\n\nuntil a NUL byte \x00 appears in the middle.\n",
        (("binary", "NUL byte at offset 36"),),
        (),
    ),
    "crlf_windows.md": (
        b"# Windows line endings\r\n\r\nCRLF text is folded to LF and kept.\r\n",
        (),
        ("Windows line endings",),
    ),
    "bom_only.txt": (codecs.BOM_UTF8, (("empty", "no text after removing the byte order mark"),), ()),
    "half_broken.jsonl": (
        "\n".join(_HALF_BROKEN_LINES).encode(),
        (
            ("malformed_json", "line 2 column"),
            ("malformed_json", "line 3: a list, not an object"),
            ("missing_text_field", "line 4: field 'text' is missing"),
            ("undecodable", "line 5: lone surrogate U+D800"),
            ("whitespace_only", "line 6: field 'text' is blank"),
            ("malformed_json", "line 8: a str, not an object"),
            ("missing_text_field", "line 9: field 'text' is a int"),
        ),
        ("First good line", "Last good line"),
    ),
    "deeply_nested.json": (b"[" * 20_000 + b"]" * 20_000, (("malformed_json", "RecursionError"),), ()),
    "huge_integer.json": (
        b'{"text": "a number too long to convert", "n": ' + b"7" * 5000 + b"}",
        (("malformed_json", "ValueError"),),
        (),
    ),
}

BIG_FILE_BYTES = 3 * 1024 * 1024
HOSTILE_MAX_FILE_BYTES = 1024 * 1024  # ingest.max_file_bytes for the hostile corpus: the big file is over it


def add_generated_hostiles(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Add to ``root`` what is made at test time; returns (expected (path relative to root, reason) rows,
    expected relative paths of the documents these entries add)."""
    rows: list[tuple[str, str]] = []
    docs: list[str] = []
    (root / "loop").symlink_to(".")  # a folder link back to its own folder: visited once
    (root / "dangling.txt").symlink_to("no-such-file.txt")
    rows.append(("dangling.txt", "broken_link"))
    (root / "ping.md").symlink_to("pong.md")
    (root / "pong.md").symlink_to("ping.md")
    rows += [("ping.md", "broken_link"), ("pong.md", "broken_link")]
    os.mkfifo(root / "pipe.txt")
    rows.append(("pipe.txt", "not_a_file"))
    deep = root.joinpath(*(f"level{i:02d}" for i in range(60)))
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text("# Sixty folders down\n\nA document at the bottom of a deep tree.\n")
    docs.append(str((deep / "bottom.md").relative_to(root)))
    (root / "deep-alias").symlink_to(deep)  # the same folder again through a link: read once
    (root / "big.txt").write_bytes(b"A line of a very big file.\n" * (BIG_FILE_BYTES // 27 + 1))
    rows.append(("big.txt", "too_large"))
    for name in (
        "spaces and ünïcödé 文件.md",
        "question?.txt",
        "star*.txt",
        "brackets[1].txt",
        "100% #1 &amp;.txt",
        "-starts-with-dash.txt",
        "ends with space .txt",
    ):
        (root / name).write_text(f"A document whose file name is {name!r}.\n", encoding="utf-8")
        docs.append(name)
    (root / "tab\tin name.txt").write_text("Ray's path handling would drop the tab.\n")
    rows.append(("tab\\tin name.txt", "bad_file_name"))
    with open(os.fsencode(root) + b"/latin1-caf\xe9.txt", "wb") as f:
        f.write(b"The name of this file is not UTF-8.\n")
    rows.append(("latin1-caf\\xe9.txt", "bad_file_name"))
    return rows, docs


def expected_static_hostile_rows() -> list[tuple[str, str]]:
    return [(name, reason) for name, (_, reasons, _) in HOSTILE_FILES.items() for reason, _ in reasons]


def main() -> None:
    BAD_INPUTS.mkdir(exist_ok=True)
    for name, (data, _, _) in FILES.items():
        (BAD_INPUTS / name).write_bytes(data)
    HOSTILE.mkdir(exist_ok=True)
    for name, (data, _, _) in HOSTILE_FILES.items():
        (HOSTILE / name).write_bytes(data)


if __name__ == "__main__":
    main()
