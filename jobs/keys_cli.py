"""Tenants' API keys for ``hxd2 serve --keys-file``.

    hxd2 keys add --file F --tenant T --index NAME [--index NAME ...] [--requests-per-minute N] [--concurrent N]
                  [--tokens-per-day N]
    hxd2 keys revoke --file F --tenant T
    hxd2 keys list --file F

``add`` prints the new key alone on stdout, once: the file keeps only a salted digest of it. Adding a tenant that
has a key replaces that key (the old one stops working). ``--index '*'`` reads every index. A running server picks
the change up within seconds (``keys_poll_s``). ``list`` shows tenants, indexes and budgets, never a key.
Exit codes: 0 done, 2 bad input (a bad file, an unknown tenant to revoke).
"""

from __future__ import annotations

import argparse
import json
import sys

from serve.tenants import BUDGETS, KeysFileError, add_tenant_key, read_keys_file, revoke_tenant


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 keys", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="a new key for a tenant, printed once")
    add.add_argument("--file", required=True, help="the keys file (created when missing)")
    add.add_argument("--tenant", required=True, help="the tenant's name (letters, digits, '.', '_', '-')")
    add.add_argument(
        "--index", dest="indexes", action="append", required=True, metavar="NAME", help="an index it may read (repeat)"
    )
    add.add_argument("--requests-per-minute", type=int, default=None, help="requests per minute (default: no limit)")
    add.add_argument("--concurrent", type=int, default=None, help="requests at once (default: no limit)")
    add.add_argument("--tokens-per-day", type=int, default=None, help="LLM tokens per UTC day (default: no limit)")
    revoke = sub.add_parser("revoke", help="remove a tenant's key")
    revoke.add_argument("--file", required=True)
    revoke.add_argument("--tenant", required=True)
    listing = sub.add_parser("list", help="tenants, indexes and budgets (never a key)")
    listing.add_argument("--file", required=True)
    listing.add_argument("--json", action="store_true", help="one JSON object per tenant")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "add":
            budgets = {name: getattr(args, name) for name in BUDGETS}
            print(add_tenant_key(args.file, args.tenant, args.indexes, **budgets))
        elif args.action == "revoke":
            if not revoke_tenant(args.file, args.tenant):
                print(f"error: {args.file} has no tenant {args.tenant!r}", file=sys.stderr)
                return 2
            print(f"revoked the key of {args.tenant}", file=sys.stderr)
        else:
            for entry in read_keys_file(args.file):
                shown = {"tenant": entry["tenant"], "indexes": entry["indexes"]}
                shown.update({name: entry.get(name) for name in BUDGETS})
                if args.json:
                    print(json.dumps(shown))
                else:
                    limits = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in shown.items() if k in BUDGETS and v)
                    print(f"{entry['tenant']}: {', '.join(entry['indexes'])}" + (f" ({limits})" if limits else ""))
    except KeysFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
