"""The one walker over an index job's input: which files to read, and a quarantine row for each one it cannot.

A local folder is walked by real path: every folder and every file is visited once, however many symbolic
links lead to it, so a link loop (``a/loop -> ..``) costs one look and duplicates nothing. Plain folders are
walked before linked ones, so a file reachable both ways keeps its plain path. A link that cannot be
resolved (dangling, or a loop of file links), a special file (FIFO, socket, device: reading one could block
forever) and a name Ray cannot pass through (not UTF-8, or holding control characters) each get a
quarantine row with the reason; nothing vanishes silently.

Never read as input: hidden names (``.git``, ``.cache``) below the root, the folders in ``exclude`` (the
job's own output, when it lies inside the input), and what an hxd2 index build wrote (``_staging``,
``vectors``, ``graph.kuzu``, ``manifest.json``, ``index_summary.json``) in any folder that is an index or a
build (it holds ``_staging/build.json``, or ``manifest.json`` beside ``graph.kuzu``): its staging parquet
files would otherwise come back as documents. S3 has no links; the same exclusions apply to its keys.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from hxd2_ray.config import S3Config
from hxd2_ray.ingest.filesystems import S3_SCHEME, resolve_filesystem
from hxd2_ray.types import QuarantinedFile

GLOB_CHARS = re.compile(r"[*?\[]")
# Ray's path handling (urllib) silently drops TAB, CR and LF, so such a file could never be read back.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
STAGING_FOLDER = "_staging"
# What an index build writes into its output folder; never read back as input (other files there are).
INDEX_ENTRIES = frozenset(
    {
        STAGING_FOLDER,
        "vectors",
        "graph.kuzu",
        "graph.kuzu.wal",
        "manifest.json",
        "index_summary.json",
        "generations",
        "_leases",
        "_logs",
        "_llm_cache",
    }
)


@dataclass
class InputListing:
    """What the walker found: files to read (sorted, in the input's URI form) and rows for what it cannot read."""

    files: list[str] = field(default_factory=list)
    quarantined: list[QuarantinedFile] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # folders left out: the output, other index folders
    revisited: int = 0  # folders or files reached again through a link and skipped

    def describe_exclusions(self) -> str:
        if not self.excluded:
            return ""
        shown = ", ".join(self.excluded[:3]) + (f" and {len(self.excluded) - 3} more" if len(self.excluded) > 3 else "")
        return f"; folders not read because they hold an index or the output: {shown}"


def is_index_folder(names: set[str], has_staging_build: bool) -> bool:
    """An index build's folder: its staging marker, or a finished index's manifest beside its graph."""
    return has_staging_build or ("manifest.json" in names and "graph.kuzu" in names)


def walk_inputs(
    uri: str, s3: S3Config, exclude: tuple[str, ...] = (), *, follow_external_links: bool = False
) -> InputListing:
    """Files under ``uri`` (a file, a folder searched recursively, or a glob with ``*``/``**``/``?``).

    ``exclude``: folders (local paths or ``s3://`` URIs) never read, e.g. the job's output when it sits inside
    the input. A missing file or folder raises ``FileNotFoundError``; a glob matching nothing gives no files.
    A link below the walked folder that leads outside it is quarantined (``link_outside_input``) unless
    ``follow_external_links``: an input folder names what is indexed, and a stray link must not widen it.
    """
    fs, path = resolve_filesystem(uri, s3)
    local = isinstance(fs, pafs.LocalFileSystem)
    excluded_roots = tuple(_exclusion_key(e, s3) for e in exclude)
    glob_at = GLOB_CHARS.search(path)
    base = path
    regex = None
    if glob_at:
        parts = path.split("/")
        first_glob = next(i for i, part in enumerate(parts) if GLOB_CHARS.search(part))
        base = "/".join(parts[:first_glob]) or ("/" if path.startswith("/") else "")
        regex = _glob_regex(parts[first_glob:])
        if base and fs.get_file_info(base).type != pafs.FileType.Directory:
            return InputListing()
    else:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            return _single_file(path, local, fs)
        if info.type != pafs.FileType.Directory:
            if local and os.path.islink(path):
                return InputListing(quarantined=[_broken_link_row(path)])
            raise FileNotFoundError(f"input not found: {uri}")
    # The output is left out when it lies below the input; an input inside the output is still read (the index's
    # own files there are recognised and skipped like any index folder's).
    base_key = os.path.realpath(base) if local else base.rstrip("/")
    excluded_roots = tuple(r for r in excluded_roots if not _is_under(base_key, (r,)))
    inside = None if follow_external_links else os.path.realpath(base or ".")
    listing = _walk_local(base, excluded_roots, inside) if local else _walk_object_store(fs, base, excluded_roots)
    if regex is not None:
        listing.files = [p for p in listing.files if regex.fullmatch(_relative(p, base))]
        listing.quarantined = [q for q in listing.quarantined if regex.fullmatch(_relative(q.source_path, base))]
    if not local:
        listing.files = [S3_SCHEME + p for p in listing.files]
        listing.quarantined = [
            QuarantinedFile(S3_SCHEME + q.source_path, q.reason, q.detail) for q in listing.quarantined
        ]
        listing.excluded = [S3_SCHEME + e for e in listing.excluded]
    return listing


def _single_file(path: str, local: bool, fs: pafs.FileSystem) -> InputListing:
    if not local:
        return InputListing(files=[S3_SCHEME + path])
    problem = _name_problem(path)
    if problem:
        return InputListing(quarantined=[QuarantinedFile(_printable(path), "bad_file_name", problem)])
    return InputListing(files=[path])


def _exclusion_key(location: str, s3: S3Config) -> str:
    fs, path = resolve_filesystem(location, s3)
    return os.path.realpath(path) if isinstance(fs, pafs.LocalFileSystem) else path.rstrip("/")


def _is_under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# --------------------------------------------------------------------------------------------- local


def _walk_local(root: str, excluded_roots: tuple[str, ...], inside: str | None = None) -> InputListing:
    listing = InputListing()
    visited_dirs: set[tuple[int, int]] = set()
    seen_files: dict[tuple[int, int], str] = {}
    candidates: list[tuple[str, bool, tuple[int, int]]] = []  # (path, reached through a link, (dev, inode))
    plain: list[str] = [root]  # folders reached without a link: walked first
    linked: list[str] = []  # folders reached through a link: walked once the plain ones are done
    while plain or linked:
        folder = plain.pop() if plain else linked.pop(0)
        try:
            st = os.stat(folder)
        except OSError as exc:
            listing.quarantined.append(QuarantinedFile(_printable(folder), "unreadable", f"folder: {exc.strerror}"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited_dirs:
            listing.revisited += 1
            continue
        real = os.path.realpath(folder)
        if _is_under(real, excluded_roots):
            listing.excluded.append(folder)
            continue
        visited_dirs.add(key)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            listing.quarantined.append(
                QuarantinedFile(_printable(folder), "unreadable", f"folder cannot be listed: {exc.strerror}")
            )
            continue
        names = {e.name for e in entries}
        staging_build = STAGING_FOLDER in names and os.path.isfile(os.path.join(folder, STAGING_FOLDER, "build.json"))
        index_owned = INDEX_ENTRIES & names if is_index_folder(names, staging_build) else set()
        listing.excluded.extend(os.path.join(folder, n) for n in sorted(index_owned))
        subfolders: list[str] = []
        for entry in entries:
            if entry.name.startswith(".") or entry.name in index_owned:
                continue
            path = entry.path
            problem = _name_problem(entry.name)
            if problem:
                what = "folder" if _is_dir(entry) else "file"
                detail = problem + ("; nothing under it was read" if what == "folder" else "")
                listing.quarantined.append(QuarantinedFile(_printable(path), "bad_file_name", detail))
                continue
            is_link = entry.is_symlink()
            if is_link and inside is not None:
                real = os.path.realpath(path)
                if os.path.exists(real) and not _is_under(real, (inside,)):
                    listing.quarantined.append(
                        QuarantinedFile(
                            _printable(path),
                            "link_outside_input",
                            (
                                f"a link to {_printable(real)}, outside the input folder; not read (set "
                                "ingest.follow_external_links: true to read what links point to)"
                            ),
                        )
                    )
                    continue
            try:
                target = os.stat(path)  # follows links
            except OSError as exc:
                if is_link:
                    listing.quarantined.append(_broken_link_row(path, exc))
                else:
                    listing.quarantined.append(QuarantinedFile(path, "unreadable", exc.strerror or str(exc)))
                continue
            if stat.S_ISDIR(target.st_mode):
                (linked if is_link else subfolders).append(path)
            elif stat.S_ISREG(target.st_mode):
                candidates.append((path, is_link, (target.st_dev, target.st_ino)))
            else:
                listing.quarantined.append(
                    QuarantinedFile(
                        path, "not_a_file", f"a {_kind(target.st_mode)}, not a regular file; it was not opened"
                    )
                )
        # Reverse order on the stack so folders come off it sorted.
        plain.extend(reversed(subfolders))
    # A file reached both plainly and through a link keeps its plain path; among equals the first path in order.
    for path, is_link, key in sorted(candidates, key=lambda c: (c[1], c[0])):
        if key in seen_files:
            listing.revisited += 1
            continue
        seen_files[key] = path
    listing.files = sorted(seen_files.values())
    listing.quarantined.sort(key=lambda q: q.source_path)
    return listing


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _broken_link_row(path: str, exc: OSError | None = None) -> QuarantinedFile:
    if exc is None:
        try:
            os.stat(path)
        except OSError as err:
            exc = err
    if exc is not None and exc.errno == errno.ELOOP:
        return QuarantinedFile(path, "broken_link", "symbolic link loop: it never reaches a file")
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return QuarantinedFile(path, "broken_link", f"symbolic link to {target!r}, which does not exist")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _name_problem(name: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8; rename it"
    if _CONTROL_CHARS.search(name):
        return "name holds control characters (tab, newline, ...), which Ray's path handling drops; rename it"
    return ""


def _printable(path: str) -> str:
    """A path Arrow can store: undecodable bytes shown as \\xNN, control characters escaped."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return _CONTROL_CHARS.sub(lambda m: repr(m.group())[1:-1], text)


# --------------------------------------------------------------------------------------------- object stores


def _walk_object_store(fs: pafs.FileSystem, root: str, excluded_roots: tuple[str, ...]) -> InputListing:
    listing = InputListing()
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    files = [i.path for i in infos if i.type == pafs.FileType.File]
    by_folder: dict[str, set[str]] = {}
    for path in files:
        parts = path.split("/")
        for depth in range(1, len(parts)):  # every folder on the key's path knows its first-level entry names
            by_folder.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
    owned = sorted(
        f"{folder}/{name}"
        for folder, names in by_folder.items()
        if is_index_folder(names, f"{folder}/{STAGING_FOLDER}/build.json" in set(files))
        for name in INDEX_ENTRIES & names
    )
    skip = tuple(owned) + excluded_roots
    listing.excluded = owned + [r for r in excluded_roots if any(_is_under(f, (r,)) for f in files)]
    for path in sorted(files):
        rel = _relative(path, root)
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        if _is_under(path, skip):
            continue
        listing.files.append(path)
    return listing


# --------------------------------------------------------------------------------------------- globs


def _relative(path: str, root: str) -> str:
    return path[len(root) :].lstrip("/") if root and path.startswith(root) else path


def _glob_regex(parts: list[str]) -> re.Pattern[str]:
    """``**`` spans any number of folders (zero included); ``*``, ``?`` and ``[..]`` stay inside one name."""
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        j, piece = 0, []
        while j < len(part):
            c = part[j]
            if c == "*":
                piece.append("[^/]*")
            elif c == "?":
                piece.append("[^/]")
            elif c == "[":
                k = part.find("]", j + 2)
                if k < 0:
                    piece.append(re.escape(c))
                else:
                    body = part[j + 1 : k]
                    if body.startswith("!"):
                        body = "^" + body[1:]
                    piece.append(f"[{body}]")
                    j = k
            else:
                piece.append(re.escape(c))
            j += 1
        out.append("".join(piece) + ("" if last else "/"))
    return re.compile("".join(out))
