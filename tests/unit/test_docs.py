"""The docs stay true: docs/settings.md is what the schema makes, the README stays short with the two
commands that really run, and every relative link in the docs points at a file that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_settings_doc", ROOT / "docs" / "gen_settings_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_settings_reference_is_what_the_schema_makes():
    gen = _gen()
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == gen.render(), (
        "docs/settings.md is not current: run python docs/gen_settings_doc.py")


def test_every_setting_of_the_schema_is_in_the_reference():
    from backend.settings import SCHEMA

    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    missing = [f"{s}.{k}" for s, table in SCHEMA.items() for k in table if f"**`{s}.{k}`**" not in text]
    assert not missing


def test_the_readme_is_short_and_its_lines_too():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 12 * 1024, f"README.md is {len(readme):,} bytes: move reference text to docs/"
    for path in (ROOT / "README.md", ROOT / "ARCHITECTURE.md"):
        long = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 120]
        assert not long, f"{path.name}: lines over 120 characters: {long}"


def test_the_readmes_two_commands_are_the_ones_that_run():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash install.sh && .venv/bin/qwen-tui --demo" in readme and "bash .ci/run" in readme
    assert "bash install.sh" in ci and (ROOT / "install.sh").is_file()
    # the test command the README says .ci/run runs is the one it runs
    said = re.search(r"then `(\.venv/bin/python -m pytest[^`]*)`", readme)
    assert said and f"exec {said.group(1)}" in ci, said
    for tool in ("ruff check .", "lint-imports", "mypy"):
        assert tool in ci and f"`{tool}`" in readme
    # the console's entry point that `.venv/bin/qwen-tui` is
    assert 'qwen-tui = "tui.entry:main"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_every_relative_link_points_at_a_file():
    broken = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken


def test_the_readme_shows_the_console():
    svg = (ROOT / "docs" / "console.svg").read_text(encoding="utf-8")
    assert "](docs/console.svg)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "qwen-tui" in svg
