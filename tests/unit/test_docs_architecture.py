"""The docs name real code: every ``path/file.py::name`` in the docs site is a file that defines that name, every
repository path they give exists, and the architecture page's layers are the import contracts' layers."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]

# `hxd2_ray/retrieval/index.py::open_index`, `hxd2_ray/indexer/flow.py::IndexBuild.run`
CODE_REFERENCE = re.compile(r"`([\w/.-]+\.py)::([\w.]+)`")
# A path into the repository's own folders, in backticks; placeholders (<id>, *, …) are not paths.
REPO_PATH = re.compile(r"`((?:hxd2_ray|jobs|serve|bench|configs|cluster|scripts|tests|docs)/[^`\s<>*…{]*)`")


def _references() -> list[tuple[str, str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), path, name)
        for page in PAGES
        for path, name in CODE_REFERENCE.findall(page.read_text(encoding="utf-8"))
    ]


def _defines(tree: ast.Module, dotted: str) -> bool:
    """Whether the module defines ``dotted``: a top-level function, class or assignment, then members of classes."""
    body: list[ast.stmt] = tree.body
    for part in dotted.split("."):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    found = node
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_the_architecture_page_names_code():
    assert sum(1 for page, _, _ in _references() if page == "docs/architecture.md") >= 40


@pytest.mark.parametrize("page, path, name", _references(), ids=lambda v: str(v))
def test_each_named_function_exists_where_the_docs_say(page: str, path: str, name: str):
    source = ROOT / path
    assert source.is_file(), f"{page} names {path}, which does not exist"
    assert _defines(ast.parse(source.read_text(encoding="utf-8")), name), f"{page}: {path} defines no {name}"


def test_every_repository_path_in_the_docs_exists():
    missing = [
        (page.relative_to(ROOT).as_posix(), path)
        for page in PAGES
        for path in REPO_PATH.findall(page.read_text(encoding="utf-8"))
        if not (ROOT / path.split("::")[0]).exists()
    ]
    assert missing == []


def _layer_table(text: str, header: str) -> list[str]:
    """The first column of the table under ``header``, each cell's backticked text with ``\\|`` unescaped."""
    lines = text.split(header, 1)[1].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("| `"):
            break
        cell = re.match(r"\| `(.*?)` \|", line.replace("\\|", "¦"))
        assert cell, line
        rows.append(cell[1].replace("¦", "|"))
    return rows


def test_the_layers_on_the_page_are_the_import_contracts():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = [c for c in contracts["contracts"] if c["type"] == "layers"]
    top = next(c["layers"] for c in layers if "containers" not in c)
    library = next(c["layers"] for c in layers if c.get("containers") == ["hxd2_ray"])
    page = ARCHITECTURE.read_text(encoding="utf-8")
    assert _layer_table(page, "| package | what it is |") == top
    assert _layer_table(page, "| layer | what it holds |") == library


def test_the_inner_layers_on_the_page_are_the_import_contracts():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    page = ARCHITECTURE.read_text(encoding="utf-8")
    for package in ("index_store", "indexer"):
        inner = next(c["layers"] for c in contracts["contracts"] if c.get("containers") == [f"hxd2_ray.{package}"])
        assert _layer_table(page, f"| `{package}` layer | what it holds |") == inner, package


def test_the_library_contracts_exempt_nothing_and_no_source_folder_is_named_build():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    library = [c for c in contracts["contracts"] if any(p.startswith("hxd2_ray") for p in c.get("containers", []))]
    assert library and not [c["name"] for c in library if c.get("exhaustive_ignores") or not c.get("exhaustive")]
    acyclic = next(c for c in contracts["contracts"] if c["type"] == "acyclic_siblings")
    assert not acyclic.get("ignore_imports"), "an import that runs back up, exempted from the cycle check"
    # GitHub's Python .gitignore and coverage tools skip folders named build: none holds source.
    named_build = [p for top in ("hxd2_ray", "jobs", "serve") for p in (ROOT / top).rglob("build") if p.is_dir()]
    assert named_build == []


def test_each_package_says_where_things_are():
    """Each package's docstring has a "Where things are" paragraph that names every module and package in it."""
    packages = [
        p.parent for top in ("hxd2_ray", "jobs", "serve") for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    ]  # fmt: skip
    unsaid = {}
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
        members = [m.stem for m in package.glob("*.py") if m.stem != "__init__"]
        members += [d.name for d in package.iterdir() if (d / "__init__.py").exists()]
        missing = [m for m in members if not re.search(rf"\b{re.escape(m)}\b", doc)]
        if "Where things are" not in doc or missing:
            unsaid[package.relative_to(ROOT).as_posix()] = missing
    assert unsaid == {}
