"""The document converters are pinned exactly: their versions are in every index's staging fingerprint, so a range
would let two installs of one release read the same documents into indexes "built with other settings"."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from hxd2_ray.config.sources import CONVERTER_PACKAGES

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    by_name: dict[str, str] = {}
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        by_name[name.lower()] = requirement[len(name) :].strip()
    return by_name


def test_every_converter_is_pinned_to_one_version_and_that_version_is_installed():
    requirements = _requirements()
    for package in CONVERTER_PACKAGES:
        spec = requirements.get(package.lower())
        assert spec is not None, f"{package} is not a dependency in pyproject.toml"
        assert re.fullmatch(r"==[0-9][0-9A-Za-z.]*", spec), (
            f"{package}{spec}: pin it with == (its version is fingerprinted)"
        )
        assert metadata.version(package) == spec[2:], f"{package}: installed {metadata.version(package)}, pinned {spec}"
