"""Themes: built-in ones plus TOML files: the project's (themes/ in a clone, tui/_themes/ in a wheel:
pyproject.toml's [tool.setuptools.package-dir]) and the user's in the XDG config dir."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from textual.app import App
from textual.theme import Theme

from backend import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGED_THEMES = Path(__file__).resolve().parent / "_themes"  # installed from a wheel
REPO_THEMES = Path(__file__).resolve().parent.parent / "themes"  # a clone (or an editable install of one)


def load_theme_file(path: Path) -> Theme:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    fields = {k: v for k, v in data.items() if k != "variables"}
    return Theme(name=fields.pop("name", path.stem), variables=data.get("variables", {}), **fields)


def register_themes(app: App[Any], chosen: str) -> list[str]:
    """Register every theme file; a broken one is skipped. Returns the problems, for the caller to
    say (it registers them before the app runs, when a notification cannot be shown yet)."""
    problems = []
    # the repo's only where no packaged copy is (beside a wheel, ../themes is site-packages/themes)
    project = PACKAGED_THEMES if PACKAGED_THEMES.is_dir() else REPO_THEMES
    for folder in (project, paths.config_dir() / "themes"):
        for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
            try:
                app.register_theme(load_theme_file(path))
            except Exception as e:
                problems.append(f"theme {path}: {e}")
    if chosen in app.available_themes:
        app.theme = chosen
    else:
        problems.append(f"theme {chosen!r} not found; using {app.theme}")
    return problems
