"""hxd2 index export / hxd2 index import: back up an index's published generation to one archive, restore it.

``hxd2 index export --index DIR_OR_S3 --output ARCHIVE.tar.gz`` writes the manifest and the published generation
(no staging, LLM cache, logs or older generations), read under a reader lease so a concurrent update cannot tear
it. ``hxd2 index import ARCHIVE --output DIR`` restores it into a missing or empty folder, every file checked
against the archive's listing and the manifest's checksums; an archive member that would land outside the folder
(absolute path, ``..``, a link, a device) is refused. Both exit 0 when done, 2 with one error line otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hxd2_ray.errors import HxdError


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hxd2 index export",
        description="write an index's manifest and published generation to one .tar.gz archive (a backup)",
    )
    parser.add_argument("--index", required=True, help="index folder or s3:// URI")
    parser.add_argument("--output", required=True, help="the archive to write (ARCHIVE.tar.gz; must not exist)")
    parser.add_argument("--config", default=None, help="YAML config (for s3 settings; default: built-in defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    return parser


def build_import_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hxd2 index import",
        description="restore an archive of hxd2 index export into a missing or empty folder, every file checked",
    )
    parser.add_argument("archive", help="the archive hxd2 index export wrote")
    parser.add_argument("--output", required=True, help="local index folder to create (missing or empty)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    return parser


def _report(result: dict[str, Any], as_json: bool, line: str) -> int:
    print(json.dumps(result, indent=2, ensure_ascii=False) if as_json else line)
    return 0


def main_export(argv: list[str] | None = None) -> int:
    from hxd2_ray.config import load_config
    from hxd2_ray.index_store.backup import export_index
    from hxd2_ray.ingest.sources import resolve_filesystem

    args = build_export_parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        fs, root = resolve_filesystem(args.index, cfg.s3)
        result = export_index(fs, root, args.output, location=args.index)
    except HxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report(
        result,
        args.json,
        f"exported generation {result['generation'] or '(flat)'} of {args.index}: {result['files']} files, "
        f"{result['bytes']:,} bytes -> {result['archive']} ({result['archive_bytes']:,} bytes)",
    )


def main_import(argv: list[str] | None = None) -> int:
    from hxd2_ray.index_store.backup import import_index

    args = build_import_parser().parse_args(argv)
    try:
        result = import_index(args.archive, args.output)
    except HxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report(
        result,
        args.json,
        f"ok: imported generation {result['generation'] or '(flat)'} into {result['index']}: {result['files']} "
        f"files match the archive and the manifest ({result['checked']})",
    )
