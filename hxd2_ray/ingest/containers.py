"""What a file's bytes really are, and zip containers opened within bounds.

A suffix is a claim; the first bytes are the evidence. A ``.docx`` that holds a PDF, or a ``.pdf`` that is a zip, is
quarantined (``type_mismatch``) before any parser sees it. DOCX, PPTX, XLSX and EPUB are zips: before a member is
read, the sizes the archive declares are added up and checked against ``ingest.max_unpacked_bytes`` (a zip bomb
declares its size, or lies about it, and then Python's reader stops at the declared size and fails the CRC check),
and the member that makes the format (``word/document.xml`` for DOCX) must be there.
"""

from __future__ import annotations

import io
import zipfile

from hxd2_ray.ingest.conversion import Bounds, Rejected

ZIP_MAGIC = b"PK\x03\x04"
PDF_MAGIC = b"%PDF-"
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # legacy .doc/.xls/.ppt, and encrypted OOXML files
# Members that make a zip a given format (its core part); an EPUB names itself in its ``mimetype`` member.
CORE_MEMBER = {
    "docx": "word/document.xml",
    "pptx": "ppt/presentation.xml",
    "xlsx": "xl/workbook.xml",
    "epub": "META-INF/container.xml",
}
MAX_MEMBERS = 100_000  # far beyond any real document; a zip of a million empty names costs memory to list


def sniff(data: bytes) -> str:
    """The kind of content the bytes hold: ``pdf``, ``zip``, ``ole2`` or ``other`` (text, HTML, anything else)."""
    if data.startswith(ZIP_MAGIC) or data.startswith(b"PK\x05\x06"):  # the second: an empty archive
        return "zip"
    if data.startswith(OLE2_MAGIC):
        return "ole2"
    # The PDF header may follow some junk (the spec allows 1024 bytes of it; readers accept it).
    if PDF_MAGIC in data[:1024]:
        return "pdf"
    return "other"


def expect_kind(data: bytes, fmt: str) -> None:
    """Raise :class:`Rejected` unless the bytes can be a ``fmt`` file (``pdf``, ``docx``, ``pptx``, ``xlsx``,
    ``epub``, or a text format: ``html``, ``csv``)."""
    kind = sniff(data)
    want = "pdf" if fmt == "pdf" else ("zip" if fmt in CORE_MEMBER else "other")
    if kind == want:
        return
    if kind == "ole2" and want == "zip":
        if "EncryptionInfo".encode("utf-16-le") in data[: 1 << 20] or b"EncryptedPackage" in data:
            raise Rejected("encrypted", f"a password-protected Office file (.{fmt}); save it without a password")
        raise Rejected(
            "type_mismatch", f"a legacy binary Office file (OLE2), not .{fmt}; save it as .{fmt} to index it"
        )
    found = {"pdf": "a PDF", "zip": "a zip archive", "ole2": "a legacy binary Office file (OLE2)"}.get(kind)
    if found is None:
        found = "text or another format" if want != "other" else "?"
    raise Rejected("type_mismatch", f"the suffix says .{fmt} but the content is {found}")


def open_zip(data: bytes, fmt: str, bounds: Bounds) -> zipfile.ZipFile:
    """The archive of a ``fmt`` file (docx, pptx, xlsx, epub), checked: readable, its declared unpacked size
    within ``ingest.max_unpacked_bytes``, and holding its format's core member."""
    expect_kind(data, fmt)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise Rejected("corrupt", f"not a readable zip archive ({type(exc).__name__}: {exc})") from exc
    if len(infos) > MAX_MEMBERS:
        raise Rejected("zip_bomb", f"{len(infos)} members > {MAX_MEMBERS}")
    unpacked = sum(i.file_size for i in infos)
    limit = bounds.cfg.max_unpacked_bytes
    if unpacked > limit:
        raise Rejected(
            "zip_bomb",
            f"unpacks to {unpacked} bytes > ingest.max_unpacked_bytes={limit} ({len(data)} bytes packed)",
        )
    if any(i.flag_bits & 0x1 for i in infos):
        raise Rejected("encrypted", "the archive's members are encrypted")
    names = {i.filename for i in infos}
    core = CORE_MEMBER[fmt]
    if core not in names:
        raise Rejected("type_mismatch", f"a zip archive without {core}: not a .{fmt} file")
    return archive


def read_member(archive: zipfile.ZipFile, name: str) -> bytes:
    """One member's bytes; a member whose content does not match its CRC (a lying size, a cut archive) is
    ``corrupt``."""
    try:
        return archive.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError) as exc:
        raise Rejected("corrupt", f"member {name}: {type(exc).__name__}: {exc}") from exc
