"""tui.themes.ThemedStylesheet: one parse of each source at start-up, a new theme's variables
still reparse every rule, and CSS with an error leaves the rules as they were."""

from __future__ import annotations

import pytest
from textual.css import stylesheet as textual_stylesheet
from textual.css.stylesheet import StylesheetParseError

from tui.themes import ThemedStylesheet

CSS = "Screen { background: $bg; }"


def parses(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = textual_stylesheet.parse

    def counting(scope, css, *a, **k):
        seen.append(css)
        return real(scope, css, *a, **k)

    monkeypatch.setattr(textual_stylesheet, "parse", counting)
    return seen


def background(sheet: ThemedStylesheet) -> str:
    (rule,) = sheet.rules
    return rule.styles.background.hex


def test_a_refresh_with_the_same_variables_parses_nothing_again(monkeypatch):
    seen = parses(monkeypatch)
    sheet = ThemedStylesheet(variables={"bg": "#102030"})
    sheet.add_source(CSS, read_from=("a.tcss", ""))
    assert background(sheet) == "#102030"
    sheet.set_variables({"bg": "#102030"})  # what App.refresh_css does after the theme is set
    sheet.reparse()
    sheet.add_source("Static { color: red; }", read_from=("b.tcss", ""))
    sheet.parse()
    assert seen == [CSS, "Static { color: red; }"]  # Textual's own reparse parsed a.tcss twice


def test_new_variables_reparse_every_rule(monkeypatch):
    seen = parses(monkeypatch)
    sheet = ThemedStylesheet(variables={"bg": "#102030"})
    sheet.add_source(CSS, read_from=("a.tcss", ""))
    assert background(sheet) == "#102030"
    sheet.set_variables({"bg": "#405060"})  # another theme
    sheet.reparse()
    assert background(sheet) == "#405060" and seen == [CSS, CSS]


def test_css_with_an_error_leaves_the_rules_as_they_were():
    sheet = ThemedStylesheet(variables={"bg": "#102030"})
    sheet.add_source(CSS, read_from=("a.tcss", ""))
    assert background(sheet) == "#102030"
    sheet.add_source("Static { color: no-such-colour; }", read_from=("b.tcss", ""))
    with pytest.raises(StylesheetParseError):
        sheet.reparse()
    assert background(sheet) == "#102030"  # the bad source is skipped from now on, the rest stands
