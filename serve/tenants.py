"""Tenants: API keys scoped to the indexes they may read, with budgets, from a keys file that changes while served.

The keys file (YAML, written by ``hxd2 keys``) holds one entry per tenant::

    version: 1
    tenants:
      - tenant: team-a
        salt: 5f1c...            # 16 random bytes, hex
        digest: 9a0b...          # HMAC-SHA256(salt, key), hex: the key itself is never on disk
        indexes: [manuals]       # the indexes it may read ("*": every index)
        requests_per_minute: 600 # budgets; absent: unlimited
        concurrent: 8
        tokens_per_day: 2000000

A key is a random 32-byte token, so one keyed hash is as strong as a slow password hash would be, and checking a
request costs microseconds. A token is compared with every entry, each in constant time, so neither the time nor
the order tells which tenant (or whether any) matched. Serve reads the file again within ``poll_s`` of a change
(:class:`ReloadingKeys`): a new key works and a revoked one stops working without a restart.

The plain keys of ``$HXD2_API_KEYS`` (or a file of one key per line) keep working: together they are one tenant,
``default``, that reads every index.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

KEYS_FILE_VERSION = 1
EVERY_INDEX = "*"
DEFAULT_TENANT = "default"
KEY_PREFIX = "hxd2-"
_TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
BUDGETS = ("requests_per_minute", "concurrent", "tokens_per_day")


class KeysFileError(ValueError):
    """The keys file cannot be read or holds an invalid entry (the message names the file and the entry)."""


@dataclass(frozen=True)
class Tenant:
    """Who a key belongs to, what it may read, and its budgets (None: unlimited)."""

    name: str
    indexes: frozenset[str] | None = None  # None: every index
    requests_per_minute: int | None = None
    concurrent: int | None = None
    tokens_per_day: int | None = None

    def may_read(self, index: str) -> bool:
        return self.indexes is None or index in self.indexes

    def visible(self, indexes: Iterable[str]) -> list[str]:
        """``indexes`` that this tenant may read, in their order."""
        return [name for name in indexes if self.may_read(name)]

    @property
    def limited(self) -> bool:
        return any(getattr(self, budget) is not None for budget in BUDGETS)


EVERYONE = Tenant(DEFAULT_TENANT)  # auth off, or the plain keys
# What a request the guard has not seen may read: nothing (a route reached around the guard shows no index).
NOBODY = Tenant("", indexes=frozenset())


def request_tenant(request: Any) -> Tenant:
    """The tenant the guard (serve.auth) put in the request's ASGI scope."""
    state = request.scope.get("state") or {}
    tenant = state.get("tenant")
    return tenant if isinstance(tenant, Tenant) else NOBODY


def unknown_index_message(index: str, tenant: Tenant, served: Iterable[str]) -> str:
    """The same words for an index that is not served and one the tenant may not read: its existence never shows."""
    return f"unknown model/index {index!r}; served: {', '.join(tenant.visible(served)) or 'none for this key'}"


def key_digest(salt: bytes, key: str) -> bytes:
    return hmac.new(salt, key.encode("utf-8"), hashlib.sha256).digest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class _Entry:
    salt: bytes
    digest: bytes
    tenant: Tenant


class TenantKeys:
    """Tokens to tenants; ``match`` compares a token with every entry in constant time."""

    def __init__(self, entries: Sequence[_Entry]):
        self._entries = tuple(entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> tuple[_Entry, ...]:
        return self._entries

    @property
    def tenants(self) -> list[Tenant]:
        return list(dict.fromkeys(e.tenant for e in self._entries))

    def match_tenant(self, token: str | None) -> tuple[int, Tenant] | None:
        """(the entry's position, its tenant) for ``token``, else None; every entry is compared."""
        found: tuple[int, Tenant] | None = None
        candidate = token or ""
        for i, entry in enumerate(self._entries):
            hit = hmac.compare_digest(key_digest(entry.salt, candidate), entry.digest)
            if hit and found is None and token is not None:
                found = (i, entry.tenant)
        return found

    @classmethod
    def of_plain_keys(cls, keys: Iterable[str]) -> "TenantKeys":
        """The plain keys as one tenant that reads every index (each key salted in memory only)."""
        out = []
        for key in keys:
            salt = secrets.token_bytes(16)
            out.append(_Entry(salt, key_digest(salt, key), EVERYONE))
        return cls(out)

    def merged(self, other: "TenantKeys") -> "TenantKeys":
        return TenantKeys([*self._entries, *other.entries])


# ------------------------------------------------------------------------------------------ the keys file


def read_keys_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The file's tenant entries, checked; a missing file is an error (a typo must not serve with no tenant)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise KeysFileError(f"keys file not found: {p}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise KeysFileError(f"keys file {p} cannot be read: {type(exc).__name__}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tenants", []), list):
        raise KeysFileError(f"keys file {p}: expected a mapping with a 'tenants' list")
    if data.get("version", KEYS_FILE_VERSION) != KEYS_FILE_VERSION:
        raise KeysFileError(f"keys file {p}: version {data.get('version')!r}, this release reads {KEYS_FILE_VERSION}")
    entries = data.get("tenants") or []
    for i, entry in enumerate(entries):
        _check_entry(p, i, entry)
    return entries


def _check_entry(path: Path, i: int, entry: Any) -> None:
    where = f"keys file {path}, entry {i + 1}"
    if not isinstance(entry, dict):
        raise KeysFileError(f"{where}: not a mapping")
    known = {"tenant", "salt", "digest", "indexes", *BUDGETS}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise KeysFileError(f"{where}: unknown keys {unknown}; valid keys: {sorted(known)}")
    name = entry.get("tenant")
    if not isinstance(name, str) or not _TENANT_NAME.match(name):
        raise KeysFileError(f"{where}: 'tenant' must be 1-64 letters, digits, '.', '_' or '-'")
    for field in ("salt", "digest"):
        value = entry.get(field)
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{32,128}", value):
            raise KeysFileError(f"{where} ({name}): '{field}' must be lower-case hex")
    indexes = entry.get("indexes")
    if not isinstance(indexes, list) or not indexes or not all(isinstance(x, str) and x for x in indexes):
        raise KeysFileError(f"{where} ({name}): 'indexes' must be a non-empty list of index names (or ['*'])")
    for budget in BUDGETS:
        value = entry.get(budget)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise KeysFileError(f"{where} ({name}): '{budget}' must be a positive whole number")


def tenant_keys(entries: Iterable[dict[str, Any]]) -> TenantKeys:
    out = []
    for entry in entries:
        indexes = entry["indexes"]
        tenant = Tenant(
            name=entry["tenant"],
            indexes=None if EVERY_INDEX in indexes else frozenset(indexes),
            **{budget: entry.get(budget) for budget in BUDGETS},
        )
        out.append(_Entry(bytes.fromhex(entry["salt"]), bytes.fromhex(entry["digest"]), tenant))
    return TenantKeys(out)


def write_keys_file(path: str | os.PathLike[str], entries: list[dict[str, Any]]) -> None:
    """Atomically (a reader sees the old file or the new one), readable by its owner only."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump({"version": KEYS_FILE_VERSION, "tenants": entries}, sort_keys=False, allow_unicode=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_tenant_key(path: str | os.PathLike[str], tenant: str, indexes: Sequence[str], **budgets: int | None) -> str:
    """A new key for ``tenant`` (its entry replaced when it has one: the old key stops working); the key."""
    entries = read_keys_file(path) if Path(path).exists() else []
    key = new_key()
    salt = secrets.token_bytes(16)
    entry: dict[str, Any] = {
        "tenant": tenant,
        "salt": salt.hex(),
        "digest": key_digest(salt, key).hex(),
        "indexes": list(dict.fromkeys(indexes)),
    }
    entry.update({name: value for name, value in budgets.items() if value is not None})
    _check_entry(Path(path), len(entries), entry)
    write_keys_file(path, [e for e in entries if e["tenant"] != tenant] + [entry])
    return key


def revoke_tenant(path: str | os.PathLike[str], tenant: str) -> bool:
    """Remove ``tenant``'s entry; False when it had none."""
    entries = read_keys_file(path)
    kept = [e for e in entries if e["tenant"] != tenant]
    if len(kept) == len(entries):
        return False
    write_keys_file(path, kept)
    return True


# ------------------------------------------------------------------------------------------ serving


class ReloadingKeys:
    """The keys of a keys file (plus the plain keys), read again within ``poll_s`` of a change to the file.

    A file that turns invalid is not taken: the keys read last stay in force, and the problem is returned once by
    ``refresh`` for the caller to log. The check is a ``stat`` at most every ``poll_s``, on the request path."""

    def __init__(self, path: str | os.PathLike[str], plain: TenantKeys | None = None, poll_s: float = 2.0):
        self.path = Path(path)
        self.plain = plain
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._stamp = self._stamp_of()
        self._keys = self._load()
        self._checked = time.monotonic()

    def _stamp_of(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load(self) -> TenantKeys:
        keys = tenant_keys(read_keys_file(self.path))
        return keys.merged(self.plain) if self.plain is not None else keys

    def refresh(self) -> str | None:
        """Read the file again when it changed since the last look (at most every ``poll_s``); a problem, or None."""
        now = time.monotonic()
        if now - self._checked < self.poll_s:
            return None
        with self._lock:
            self._checked = now
            stamp = self._stamp_of()
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                self._keys = self._load()
            except KeysFileError as exc:
                return f"{exc}; the keys read before stay in force"
        return None

    @property
    def keys(self) -> TenantKeys:
        return self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def match_tenant(self, token: str | None) -> tuple[int, Tenant] | None:
        return self._keys.match_tenant(token)
