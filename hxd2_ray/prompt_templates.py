"""Prompt templates kept as versioned YAML data (extraction, query, logic form, multi-stage, judge): reading a
packaged set, parsing its language sections, hashing its version, and filling placeholders."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

import yaml

TemplateFiller = Callable[..., str]
T = TypeVar("T")
L = TypeVar("L")

# The line right before the chunk text in every extraction user message (the extraction prompt files must end
# with it). The text comes last so that all chunks share the instruction prefix (vLLM prefix caching); the LLM
# fakes find the chunk text after this marker, which is why it lives here and not in extraction/.
TEXT_MARKER = "######## Text ########"


def placeholder_filler(placeholders: Sequence[str]) -> TemplateFiller:
    """``fill(template, **values)`` substituting only these ``{name}``s, in one pass.

    Unlike ``str.format`` it leaves JSON braces alone and never re-expands a placeholder that appears inside a
    substituted value (a chunk or a question may well contain ``{entity_types}``).
    """
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, placeholders)) + r")\}")

    def fill(template: str, **values: str) -> str:
        return pattern.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)

    return fill


def read_prompt_set(package: str, kind: str, version: str) -> bytes:
    """Bytes of the packaged prompt file ``<package>/prompts/<kind>_<version>.yaml``.

    A missing version raises FileNotFoundError naming the path looked at.
    """
    name = f"{kind}_{version}.yaml"
    resource = resources.files(package).joinpath("prompts", name)
    if not resource.is_file():
        folder = package.replace(".", "/")
        raise FileNotFoundError(f"no {kind} prompt set {version!r} (looked for {folder}/prompts/{name})")
    return resource.read_bytes()


def parse_prompt_languages(raw: bytes, kind: str) -> dict[str, Any]:
    """The YAML of a prompt set: a mapping of language codes to sections, with an ``en`` section."""
    data = yaml.safe_load(raw.decode("utf-8"))
    if not isinstance(data, dict) or "en" not in data:
        raise ValueError(f"{kind} prompt file must map language codes to templates and have an 'en' section")
    return data


def prompt_version_hash(raw: bytes, version: str) -> str:
    """``"<version>-<12 hex of sha256(yaml bytes)>"``: names exactly which prompt text produced an output."""
    return f"{version}-{hashlib.sha256(raw).hexdigest()[:12]}"


def parse_languages(raw: bytes, kind: str, parse_language: Callable[[str, Any], T]) -> Mapping[str, T]:
    """Every language section of a prompt set, each parsed by ``parse_language(lang, section)``; read-only."""
    data = parse_prompt_languages(raw, kind)
    return MappingProxyType({str(lang): parse_language(str(lang), section) for lang, section in data.items()})


def section_value(kind: str, lang: str, section: Any, path: Sequence[str]) -> Any:
    """``section[path[0]][path[1]]…``; a missing key is a ValueError naming ``<kind> prompt file: lang.path``."""
    node: Any = section
    for part in path:
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"{kind} prompt file: {lang}.{'.'.join(path)} is missing")
        node = node[part]
    return node


def section_text(kind: str, lang: str, section: Any, path: Sequence[str], *, strip: bool = True) -> str:
    """The non-empty template at ``path``, stripped (block scalars end with a newline) unless ``strip=False``."""
    node = section_value(kind, lang, section, path)
    if not isinstance(node, str) or not node.strip():
        raise ValueError(f"{kind} prompt file: {lang}.{'.'.join(path)} must be a non-empty string")
    return node.strip() if strip else node


def check_placeholders(
    label: str,
    lang: str,
    prompts: Any,
    *,
    ends_with: Sequence[tuple[str, str]] = (),
    contains: Sequence[tuple[str, str]] = (),
) -> None:
    """That a language's parsed templates hold their placeholders: for each ``(where, name)``, the template at
    ``where`` ends with ``{name}`` (``ends_with``) or holds it anywhere (``contains``). ``where`` is the field of
    ``prompts``, or the file's path to it with a dot for the field's underscore (``answer.user``: field
    ``answer_user``), as the error names it: a ValueError ``<label> prompt file: <lang>.<where> must …``."""
    for where, name in ends_with:
        if not getattr(prompts, where.replace(".", "_")).endswith("{" + name + "}"):
            raise ValueError(f"{label} prompt file: {lang}.{where} must end with {{{name}}}")
    for where, name in contains:
        if "{" + name + "}" not in getattr(prompts, where.replace(".", "_")):
            raise ValueError(f"{label} prompt file: {lang}.{where} must contain {{{name}}}")


@dataclass(frozen=True, slots=True)
class PromptSet(Generic[L]):
    """One version of a kind of prompts: its templates per language (``L``: that kind's parsed section)."""

    version: str
    version_hash: str  # "v1-<12 hex of sha256(yaml bytes)>"
    languages: Mapping[str, L]

    def for_language(self, language: str) -> L:
        """Templates of ``language``; English when the language has none (a chunk's language is a guess)."""
        found = self.languages.get(language)
        return found if found is not None else self.languages["en"]


class PromptSetLoader(Generic[L]):
    """Reads one kind of prompt set: the packaged ``<package>/prompts/<kind>_<version>.yaml`` (cached: packaged
    sets are immutable) or any file (experiments, tests), each language section parsed by ``parse_language``."""

    def __init__(self, package: str, kind: str, parse_language: Callable[[str, Any], L], label: str | None = None):
        self.package, self.kind, self.parse_language = package, kind, parse_language
        self.label = label or kind  # how errors name the file: "<label> prompt file: en.x is missing"
        self._packaged: dict[str, PromptSet[L]] = {}

    def parse(self, raw: bytes, version: str) -> PromptSet[L]:
        """Validate and freeze a prompt YAML; the hash covers the exact bytes."""
        languages = parse_languages(raw, self.label, self.parse_language)
        return PromptSet(version=version, version_hash=prompt_version_hash(raw, version), languages=languages)

    def load(self, version: str = "v1") -> PromptSet[L]:
        if version not in self._packaged:
            self._packaged[version] = self.parse(read_prompt_set(self.package, self.kind, version), version)
        return self._packaged[version]

    def load_file(self, path: str | Path, version: str | None = None) -> PromptSet[L]:
        """A set from any file; the version defaults to the file name's suffix (``<kind>_<version>.yaml``)."""
        p = Path(path)
        return self.parse(p.read_bytes(), version or p.stem.removeprefix(f"{self.kind}_"))
