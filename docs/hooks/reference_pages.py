"""MkDocs hook (``hooks:`` in mkdocs.yml): the pages generated from the code join the site when it is built.

The configuration reference comes from the pydantic models and the CLI reference from the argparse parsers, at
every build; nothing generated is committed, so neither can describe code that has changed since. The benchmark
figures under ``bench/figures/`` are served from where the benchmarks write them, not copied into ``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from cli_reference import cli_reference_page
from config_reference import config_reference_page
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

GENERATED_PAGES = {
    "reference/configuration.md": config_reference_page,
    "reference/cli.md": cli_reference_page,
}
BENCH_FIGURES = Path(__file__).resolve().parents[2] / "bench" / "figures"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for uri, render in GENERATED_PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    for figure in sorted(BENCH_FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{figure.name}", abs_src_path=str(figure)))
    return files
