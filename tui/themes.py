"""Themes: built-in ones plus TOML files: the project's (themes/ in a clone, tui/_themes/ in a wheel:
pyproject.toml's [tool.setuptools.package-dir]) and the user's in the XDG config dir."""

from __future__ import annotations

import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

import rich
import textual
from textual.app import App
from textual.css.model import RuleSet
from textual.css.stylesheet import Stylesheet
from textual.css.types import CSSLocation
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
    still leaves the rules as they were (parse() replaces them only once all have parsed).

    With `kept` (a file), the parses are also kept between starts: Textual's parser took ~6 ms of the
    first frame for the ~25 sources a start reads, and loading them parsed takes ~0.5 ms. `save()`
    writes what was parsed anew; the file is read only where the theme's variables, Python, Textual
    and Rich are those it was written with, and only where this user alone can write it (it is a
    pickle). Anything else, or a file that does not load, is parsed as Textual parses it."""

    def __init__(self, *, variables: dict[str, str] | None = None, kept: Path | None = None) -> None:
        super().__init__(variables=variables)
        self._kept = kept
        self._loaded: dict[tuple[Any, ...], list[RuleSet]] = _load_kept(kept, self._variables) if kept else {}
        self._new: dict[tuple[Any, ...], list[RuleSet]] = {}

    def set_variables(self, variables: dict[str, str]) -> None:
        if variables != self._variables:  # the same ones (a refresh with no new theme): the cache stands
            super().set_variables(variables)
            self._loaded, self._new = {}, {}  # parsed with the old ones

    def reparse(self) -> None:
        self.parse()

    def _parse_rules(self, css: str, read_from: CSSLocation, is_default_rules: bool = False,
                     tie_breaker: int = 0, scope: str = "") -> list[RuleSet]:
        key = (css, read_from, is_default_rules, tie_breaker, scope)
        kept = self._loaded.get(key)
        if kept is not None:
            return kept
        rules = super()._parse_rules(css, read_from, is_default_rules, tie_breaker, scope)
        if self._kept is not None and not any(rule.errors for rule in rules):
            self._new[key] = rules
        return rules

    def save(self) -> None:
        """Keep what was parsed since the file was read (nothing to write: no write)."""
        if self._kept is None or not self._new:
            return
        rules = {**self._loaded, **self._new}
        try:
            data = pickle.dumps({"stamp": _stamp(), "variables": self._variables, "rules": rules},
                                protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a later Textual's rules may not pickle: then each start parses, as Textual does
            self._kept = None
            return
        tmp = self._kept.with_name(f".{self._kept.name}.{os.getpid()}.tmp")
        try:
            self._kept.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self._kept)
        except OSError:  # a cache: the next start parses again
            tmp.unlink(missing_ok=True)
            return
        self._loaded, self._new = rules, {}


def _stamp() -> tuple[Any, ...]:
    """What the pickled rules' classes come from: Python, and Textual's and Rich's installs (an
    upgrade rewrites their files)."""

    out: list[Any] = [sys.version_info[:3]]
    for package in (textual, rich):
        st = os.stat(str(package.__file__))
        out.append((package.__file__, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _load_kept(path: Path, variables: dict[str, str]) -> dict[tuple[Any, ...], list[RuleSet]]:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
                return {}  # a pickle runs what it holds: only this user's own file is read
            data = pickle.load(f)
        if data["stamp"] == _stamp() and data["variables"] == variables:
            return dict(data["rules"])
    except Exception:  # missing, cut short, another version's classes: parsed as Textual parses it
        pass
    return {}


def use_themed_stylesheet(app: App[Any], kept: Path | None = None) -> None:
    """Give an app that has not started a ThemedStylesheet with its current theme's variables
    (`kept`: the file its parses are kept in between starts)."""
    app.stylesheet = ThemedStylesheet(variables=app.get_css_variables(), kept=kept)
