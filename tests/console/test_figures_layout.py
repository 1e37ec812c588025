"""The startup figures' two columns (tui/widgets/figures_panel.py layout): names padded to the
longest, a long value wrapped under its own column, the names narrowed only to keep the values
readable, nothing cut, no line wider than the panel."""

from __future__ import annotations

import pytest

from tui.widgets.figures_panel import MIN_VALUE_W, layout

PAIRS = [("vLLM", "0.20.2"), ("max concurrency", "393.00x @ 8,192 tok"),
         ("listening", "http://127.0.0.1:8011"), ("  ▸ loading_weights", "2.0 s")]


def test_rows_that_fit_are_one_line_each_with_the_values_in_one_column():
    lines = layout(PAIRS, 60)
    assert [(n + " " + v).rstrip() for n, v in lines] == [
        "vLLM                0.20.2",
        "max concurrency     393.00x @ 8,192 tok",
        "listening           http://127.0.0.1:8011",
        "  ▸ loading_weights 2.0 s"]


def test_a_long_value_wraps_under_its_own_column_at_a_word():
    lines = layout(PAIRS, 30)
    values = [v for _n, v in lines]
    assert ("max concurrency", "393.00x @") in lines
    assert values[values.index("393.00x @") + 1] == "8,192 tok"
    assert lines[values.index("8,192 tok")][0] == " " * 15  # under the value, not under the name


def test_an_indented_name_runs_on_rather_than_wrap_the_values():
    """40 columns (the side panel's inside): the phase row's long name would leave the values 20 columns
    and fold the address; the name column narrows to what the values leave (not below the figures'
    names), and the phase row's value follows its name."""
    lines = layout(PAIRS, 40)
    assert [(n + " " + v).rstrip() for n, v in lines] == [
        "vLLM               0.20.2",
        "max concurrency    393.00x @ 8,192 tok",
        "listening          http://127.0.0.1:8011",
        "  ▸ loading_weights 2.0 s"]


@pytest.mark.parametrize("width", [20, 28, 36, 44])
def test_nothing_is_cut_and_no_line_is_wider_than_the_panel(width):
    lines = layout(PAIRS, width)
    assert all(len(n) + 1 + len(v) <= width for n, v in lines)
    names = "".join(n for n, _v in lines).replace(" ", "")
    values = "".join(v for _n, v in lines).replace(" ", "")
    assert names == "".join(n for n, _v in PAIRS).replace(" ", "")
    assert values == "".join(v for _n, v in PAIRS).replace(" ", "")


def test_the_names_narrow_before_the_values_fall_under_their_minimum():
    lines = layout(PAIRS, 28)
    value_w = 28 - 1 - len(lines[0][0])
    assert value_w >= MIN_VALUE_W
    assert lines[-1] == ("  ▸ loading_weights", "2.0 s")  # whole: the line has room for it
    assert ("max", "393.00x @") in [(n.strip(), v) for n, v in lines]  # the name wraps first


def test_no_figures_no_lines():
    assert layout([], 40) == []
