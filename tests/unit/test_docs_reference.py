"""The generated references of the docs site cover the code: every field of every configuration model (hxd2's and
the Serve application's ``args``) has its row, and every ``hxd2`` command and subcommand its help."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

from hxd2_ray.config import HxdConfig, RetrievalConfig
from jobs import cli
from serve.schemas import ServeAppArgs

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "hooks"


def _hook(name: str) -> ModuleType:
    """A module of docs/hooks, loaded from its file as MkDocs loads the hooks (docs/ is no package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HOOKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def config_reference() -> ModuleType:
    return _hook("config_reference")


@pytest.fixture(scope="module")
def cli_reference() -> ModuleType:
    return _hook("cli_reference")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    return found + [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _every_field(root: type[BaseModel]) -> set[tuple[type[BaseModel], str]]:
    """(model, field) for every model reachable from ``root`` through the field types, found independently of the
    generator's own walk."""
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        todo += [m for info in model.model_fields.values() for m in _models_in(info.annotation)]
    return {(model, name) for model in seen for name in model.model_fields}


@pytest.mark.parametrize("tree, root", [("hxd2", HxdConfig), ("serve", ServeAppArgs)])
def test_every_config_field_is_in_the_reference(config_reference: ModuleType, tree: str, root: type[BaseModel]):
    sections = config_reference.reference_sections()[tree]
    covered = {(k.model, k.field) for s in sections for k in s.keys} | {s.owner for s in sections if s.owner}
    assert _every_field(root) - covered == set()
    page = config_reference.config_reference_page()
    missing = [k.key for s in sections for k in s.keys if f"| `{k.key}` |" not in page]
    assert missing == []


def test_undescribed_fields_are_marked_in_the_reference(config_reference: ModuleType):
    # Rows in page order are the keys in section order (one key may be a row of several backends' tables).
    rows = [line for line in config_reference.config_reference_page().splitlines() if line.startswith("| `")]
    keys = [k for sections in config_reference.reference_sections().values() for s in sections for k in s.keys]
    assert len(rows) == len(keys)
    for row, key in zip(rows, keys, strict=True):
        assert row.startswith(f"| `{key.key}` |")
        if key.description:
            assert config_reference.NO_DESCRIPTION not in row, key.key
        else:
            assert row.endswith(f"| {config_reference.NO_DESCRIPTION} |"), key.key


def test_the_reference_shows_types_bounds_and_defaults_from_the_models(config_reference: ModuleType):
    page = config_reference.config_reference_page()
    row = next(line for line in page.splitlines() if line.startswith("| `retrieval.top_k_entities` |"))
    field = RetrievalConfig.model_fields["top_k_entities"]
    assert f"`{field.default}`" in row and "`int`, ≥ 0" in row and field.description in row
    # A backend-chosen section: one table per backend, each with its own fields.
    assert "`llm (backend: vllm)`" in page and "| `llm.max_model_len` |" in page
    assert "`llm (backend: scripted)`" in page and "| `llm.fail_when` |" in page
    # A mapping of named sections documents the value model's fields under a placeholder key.
    assert "| `cost.prices.<name>.input_usd_per_million` |" in page


def _documented_commands(page: str) -> set[str]:
    return set(re.findall(r"^#+ `(hxd2 [^`]+)`$", page, re.MULTILINE))


def test_every_command_and_subcommand_is_in_the_cli_reference(cli_reference: ModuleType):
    documented = _documented_commands(cli_reference.cli_reference_page())
    expected = {f"hxd2 {name}" for name in cli.COMMANDS}
    for name, (module_name, _) in cli.COMMANDS.items():
        module = importlib.import_module(module_name)
        expected |= {f"hxd2 {name} {sub}" for sub in getattr(module, "SUBCOMMANDS", ())}
    # Every parser named in the commands' code, nested commands dispatched by hand included (`hxd2 index delete`).
    for source in (ROOT / "jobs").glob("*.py"):
        expected |= set(re.findall(r"prog(?:: str)?\s*=\s*\"(hxd2 [^\"{]+)\"", source.read_text(encoding="utf-8")))
    assert expected - documented == set()


def test_each_help_is_the_parser_of_its_own_command(cli_reference: ModuleType):
    helps = cli_reference.command_helps()
    assert {h.name for h in helps} == _documented_commands(cli_reference.cli_reference_page())
    for entry in helps:
        if entry.help is not None:
            assert entry.help.startswith(f"usage: {entry.name} "), entry.name
    query = next(h for h in helps if h.name == "hxd2 query")
    assert "--mode" in query.help and "--index INDEX" in query.help


def test_collecting_the_parsers_leaves_argparse_as_it_was(cli_reference: ModuleType):
    original = argparse.ArgumentParser.parse_known_args
    cli_reference.command_helps()
    assert argparse.ArgumentParser.parse_known_args is original
    assert argparse.ArgumentParser(prog="x").parse_args([]) == argparse.Namespace()
