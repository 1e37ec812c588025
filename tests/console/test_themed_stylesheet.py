"""tui.themes.ThemedStylesheet: one parse of each source at start-up, a new theme's variables
still reparse every rule, and CSS with an error leaves the rules as they were."""

from __future__ import annotations

import pytest
from textual.css import stylesheet as textual_stylesheet
from textual.css.stylesheet import StylesheetParseError

from tui import themes
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


# -- parses kept between starts (ThemedStylesheet(kept=...)) ------------------------------------
def kept_sheet(path, bg="#102030", css=CSS):
    sheet = ThemedStylesheet(variables={"bg": bg}, kept=path)
    sheet.add_source(css, read_from=("a.tcss", ""))
    sheet.parse()
    return sheet


def test_a_second_start_reads_the_kept_parses_and_parses_nothing(monkeypatch, tmp_path):
    path = tmp_path / "cache" / "tcss.pickle"
    first = kept_sheet(path)
    first.save()
    assert path.stat().st_mode & 0o777 == 0o600
    seen = parses(monkeypatch)
    second = kept_sheet(path)
    assert seen == [] and background(second) == "#102030"
    assert [r.css for r in second.rules] == [r.css for r in first.rules]
    mtime = path.stat().st_mtime_ns
    second.save()  # nothing new: no write
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("spoil", ["other variables", "another install", "writable by others", "garbage",
                                   "cut short"])
def test_kept_parses_that_do_not_fit_are_parsed_anew(monkeypatch, tmp_path, spoil):
    path = tmp_path / "tcss.pickle"
    kept_sheet(path).save()
    bg = "#102030"
    if spoil == "other variables":
        bg = "#405060"
    elif spoil == "another install":
        monkeypatch.setattr(themes, "_stamp", lambda: ("textual", "another version"))
    elif spoil == "writable by others":
        path.chmod(0o666)
    elif spoil == "garbage":
        path.write_bytes(b"not a pickle")
    else:
        path.write_bytes(path.read_bytes()[:100])
    seen = parses(monkeypatch)
    sheet = kept_sheet(path, bg=bg)
    assert seen == [CSS] and background(sheet) == bg
    sheet.save()  # the file is whole again, for the next start
    seen.clear()
    assert background(kept_sheet(path, bg=bg)) == bg and seen == []


def test_css_with_an_error_is_never_kept(tmp_path):
    path = tmp_path / "tcss.pickle"
    bad = "Static { color: no-such-colour; }"
    with pytest.raises(StylesheetParseError):
        kept_sheet(path, css=bad)
    sheet = kept_sheet(path)
    sheet.save()
    with pytest.raises(StylesheetParseError):  # the error is said again at the next start
        kept_sheet(path, css=bad)


async def test_the_console_keeps_its_parses_and_its_next_start_parses_none_of_them(qhome, monkeypatch):
    from backend.server.client import Poll
    from tests.helpers.console import app_with

    seen = parses(monkeypatch)
    app, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for _ in range(200):  # written once the first frame is out
            if (qhome / "cache" / "tcss.pickle").exists():
                break
            await pilot.pause(0.05)
        assert (qhome / "cache" / "tcss.pickle").exists()
    assert any("#body" in css for css in seen)  # main.tcss, parsed at the first start
    seen.clear()
    again, _ = app_with([Poll(state={"state": "stopped"})], qhome)
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.screen.query_one("#body").styles.height is not None
    assert seen == []


def test_rules_that_do_not_pickle_are_parsed_at_each_start_and_break_nothing(monkeypatch, tmp_path):
    path = tmp_path / "tcss.pickle"
    sheet = kept_sheet(path)

    def refuse(*a, **k):
        raise TypeError("cannot pickle")

    monkeypatch.setattr(themes.pickle, "dumps", refuse)
    sheet.save()
    assert not path.exists() and background(sheet) == "#102030"
