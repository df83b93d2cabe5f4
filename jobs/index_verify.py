"""hxd2 index verify --index DIR_OR_S3: check every index file against the manifest's sizes and sha256.

Exit 0 when every recorded file is present with its size and checksum, 2 when one is missing or damaged (each
named), or when the index has no manifest. ``--sizes-only`` skips the checksums (a stat per file).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hxd2_ray.errors import HxdError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 index verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="index folder or s3:// URI")
    parser.add_argument("--config", default=None, help="YAML config (for s3 settings; default: built-in defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--sizes-only", action="store_true", help="check sizes only, not sha256")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    return parser


def verify_index(location: str, cfg: Any, checksums: bool = True) -> dict[str, Any]:
    from hxd2_ray.index_store.manifest import find_damage, read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem

    fs, root = resolve_filesystem(location, cfg.s3)
    manifest = read_manifest(root, filesystem=fs)
    damage = find_damage(root, manifest, checksums=checksums, filesystem=fs)
    return {
        "index": location,
        "files": len(manifest.files),
        "checked": "size+sha256" if checksums else "size",
        "ok": not damage and bool(manifest.files),
        "damaged": [{"file": d.file, "problem": d.problem} for d in damage],
        "note": ""
        if manifest.files
        else "the manifest records no file sizes or checksums (built before they were recorded); rebuild to get them",
    }


def main(argv: list[str] | None = None) -> int:
    from hxd2_ray.config import load_config

    args = build_parser().parse_args(argv)
    try:
        result = verify_index(args.index, load_config(args.config, args.overrides), checksums=not args.sizes_only)
    except HxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    elif result["ok"]:
        print(f"ok: {result['files']} files match the manifest ({result['checked']}) in {args.index}")
    if result["damaged"]:
        problems = "; ".join(d["problem"] for d in result["damaged"])
        print(
            f"error: {len(result['damaged'])} of {result['files']} index files damaged in {args.index}: {problems}",
            file=sys.stderr,
        )
        return 2
    if result["note"]:
        print(f"error: {result['note']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
