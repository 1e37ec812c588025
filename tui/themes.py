"""Themes: built-in ones plus user TOML files in themes/ (repo) and the XDG config dir."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.app import App
from textual.theme import Theme

from backend import paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_THEMES = Path(__file__).resolve().parent.parent / "themes"


def load_theme_file(path: Path) -> Theme:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    fields = {k: v for k, v in data.items() if k != "variables"}
    return Theme(name=fields.pop("name", path.stem), variables=data.get("variables", {}), **fields)


def register_themes(app: App, chosen: str) -> list[str]:
    """Register every theme file; a broken one is skipped. Returns the problems, for the caller to
    say (it registers them before the app runs, when a notification cannot be shown yet)."""
    problems = []
    for folder in (REPO_THEMES, paths.config_dir() / "themes"):
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
