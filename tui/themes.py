"""Themes: built-in ones plus TOML files: the project's (themes/ in a clone, tui/_themes/ in a wheel:
pyproject.toml's [tool.setuptools.package-dir]) and the user's in the XDG config dir."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from textual.app import App
from textual.css.stylesheet import Stylesheet
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


class ThemedStylesheet(Stylesheet):
    """Textual's stylesheet, less a second parse of every rule at start-up. Textual reparses every
    source in a fresh sheet, without its cache (so that an error leaves this one whole), whenever it
    refreshes the CSS, as it does once the chosen theme is set: that parsed app.tcss, main.tcss and
    the defaults twice before the first frame (~4 ms). Here a reparse parses in place, through the
    cache, which holds parses with the current variables only (set_variables empties it); an error
    still leaves the rules as they were (parse() replaces them only once all have parsed)."""

    def set_variables(self, variables: dict[str, str]) -> None:
        if variables != self._variables:  # the same ones (a refresh with no new theme): the cache stands
            super().set_variables(variables)

    def reparse(self) -> None:
        self.parse()


def use_themed_stylesheet(app: App[Any]) -> None:
    """Give an app that has not started a ThemedStylesheet with its current theme's variables."""
    app.stylesheet = ThemedStylesheet(variables=app.get_css_variables())
