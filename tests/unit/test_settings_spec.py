"""Each setting's facts live in its Key (backend/settings/spec.py), and everything else is read from there:
the checks, the typed sections, the launch flags, the chat's defaults and ranges."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping

import pytest

from backend import record, setting_rows
from backend import settings as S
from backend.chat.conversation import ChatParams, parse_param
from backend.chat.stream import stream_chat
from backend.server import launch
from backend.settings.spec import Key


def test_a_number_without_a_range_cannot_be_declared():
    with pytest.raises(TypeError, match="needs a range"):
        Key(int, 1, "a count")
    with pytest.raises(TypeError, match="needs a range"):
        Key((int, float), 1.0, "seconds")
    with pytest.raises(TypeError, match="only a number has one"):
        Key(str, "", "a name", range=(1, None))
    with pytest.raises(TypeError, match="non-empty"):
        Key(int, 1, "a count", range=(1, None), non_empty=True)
    with pytest.raises(TypeError, match="negatable"):
        Key(str, None, "a word", flag="negatable")


@pytest.mark.parametrize("section,key", [(s, k) for s, t in S.SCHEMA.items() for k, spec in t.items() if spec.range])
def test_check_value_takes_the_range_from_the_spec(section, key):
    spec = S.SCHEMA[section][key]
    low, high = spec.range
    floaty = float in (spec.type if isinstance(spec.type, tuple) else (spec.type,))
    if low is not None:
        assert S.check_value(section, key, low) == low
        with pytest.raises(S.ConfigError, match="out of range|not a TCP port|must be in"):
            S.check_value(section, key, low - (0.001 if floaty else 1))
    if high is not None:
        assert S.check_value(section, key, high) == high
        with pytest.raises(S.ConfigError, match="out of range|not a TCP port|must be in"):
            S.check_value(section, key, high + 1)


def test_check_value_follows_a_changed_spec(monkeypatch):
    """The check reads the Key, not a table of its own: narrow a range and the check follows."""
    monkeypatch.setitem(S.CHAT, "temperature", record.replace(S.CHAT["temperature"], range=(0, 1)))
    with pytest.raises(S.ConfigError, match="0 to 1"):
        S.check_value("chat", "temperature", 1.5)
    with pytest.raises(ValueError, match="0 to 1"):
        parse_param("temperature", "1.5")
    monkeypatch.setitem(S.SERVER, "quantization", record.replace(S.SERVER["quantization"], non_empty=True))
    with pytest.raises(S.ConfigError, match="may not be empty"):
        S.check_value("server", "quantization", " ")

    def no_fp8(value):
        if value == "fp8":
            raise S.ConfigError("server.quantization: no fp8 here")
        return value.lower()

    monkeypatch.setitem(S.SERVER, "quantization", record.replace(S.SERVER["quantization"], check=no_fp8))
    with pytest.raises(S.ConfigError, match="no fp8 here"):
        S.check_value("server", "quantization", "fp8")
    assert S.check_value("server", "quantization", "AWQ") == "awq"  # the value the Key's check keeps


@pytest.mark.parametrize("section,key", [(s, k) for s, t in S.SCHEMA.items() for k, spec in t.items()
                                         if spec.non_empty])
def test_a_non_empty_key_refuses_an_empty_string(section, key):
    with pytest.raises(S.ConfigError, match="may not be empty"):
        S.check_value(section, key, "")


def test_the_chat_defaults_are_the_schemas():
    params = inspect.signature(stream_chat).parameters
    assert params["max_tokens"].default == S.CHAT["max_tokens"].default == 512
    assert params["temperature"].default == S.CHAT["temperature"].default
    p = ChatParams()
    assert (p.max_tokens, p.temperature, p.top_p) == tuple(S.CHAT[k].default for k in ("max_tokens", "temperature",
                                                                                        "top_p"))


def _accepts(hint, value) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, __import__("types").UnionType):
        return any(_accepts(a, value) for a in args)
    if origin is tuple:
        return isinstance(value, tuple) and all(_accepts(args[0], v) for v in value)
    if origin is Mapping or hint is Mapping:
        return isinstance(value, Mapping)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


@pytest.mark.parametrize("name", list(S.SECTIONS))
def test_each_typed_field_holds_its_specs_default_and_choices(name):
    cls = S.SECTIONS[name]
    hints = typing.get_type_hints(cls)
    hints = {n: h for n, h in hints.items() if n != "KEYS"}
    assert list(hints) == list(cls.KEYS) == list(S.SCHEMA[name])  # every annotated field has a Key
    typed = S.from_values(cls, S.defaults()[name])
    assert typed == cls()  # a section built with nothing holds the defaults
    for field_name, hint in hints.items():
        spec = S.SCHEMA[name][field_name]
        assert _accepts(hint, getattr(typed, field_name)), f"{name}.{field_name}: default {spec.default!r}"
        for choice in spec.choices or ():
            assert _accepts(hint, choice), f"{name}.{field_name}: choice {choice!r}"
        if typing.get_origin(hint) is typing.Literal:
            assert typing.get_args(hint) == spec.choices, f"{name}.{field_name}: Literal is not the choices"


def test_the_typed_sections_are_frozen_and_follow_the_values():
    s = S.load(demo=True)
    assert s.server_cfg.port == s.server["port"] and s.console_cfg.confirm == "running"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.server_cfg.port = 1  # type: ignore[misc]
    s.planner.update(device="cpu")
    assert s.planner_cfg.device == "cpu"
    copy = __import__("copy").deepcopy(s)  # the settings screen's preview plans a changed copy
    copy.server["port"] = 9
    assert copy.server_cfg.port == 9 and s.server_cfg.port != 9


def test_the_typed_values_are_the_checked_ones(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nmax_model_len = "Auto"\nextra_args = ["--x", 3]\nserved_model_name = ["a", "b"]\n'
                   '[server.env]\nN = 1\n[console]\nhealth_interval_s = 2\n')
    s = S.load(config=str(cfg))
    srv = s.server_cfg
    assert srv.max_model_len == "auto" and srv.extra_args == ("--x", "3") and srv.served_model_name == ("a", "b")
    assert dict(srv.env) == {"N": "1"} and s.console_cfg.health_interval_s == 2
    assert s.snapshot()["server"]["extra_args"] == ["--x", 3]  # the JSON snapshot keeps the file's values


def test_the_launch_flags_come_from_the_spec(tmp_path):
    s = S.load(demo=True, overrides=["server.enable_prefix_caching=false", "server.enforce_eager=false",
                                     "server.sleep_after_idle_s=60", "server.api_key=sk-abcdef"])
    flags = launch.server_flags(s)
    assert "--no-enable-prefix-caching" in flags and "--no-enforce-eager" not in flags
    for key, spec in S.SERVER.items():
        if spec.flag == "none":
            assert launch._flag(key) not in flags, key
    assert "sk-abcdef" not in " ".join(flags)


def test_when_a_change_applies_and_what_is_secret_come_from_the_spec():
    for section, table in S.SCHEMA.items():
        for key, spec in table.items():
            assert setting_rows.needs_restart(section, key) == (spec.applies in ("restart", "supervisor"))
            assert setting_rows.is_secret(section, key) == spec.secret
    assert setting_rows.effect("console", "log_max_lines") == "when the console starts again"
    assert setting_rows.needs_restart("console", "stop_timeout") and not setting_rows.needs_restart("console", "theme")
    assert [k for t in S.SCHEMA.values() for k, spec in t.items() if spec.secret] == ["api_key"]


def test_the_settings_import_nothing_that_reads_them():
    """The type-only circle apikey <-> settings is gone: nothing under backend.settings reaches apikey,
    even through imports made only for type checking."""
    grimp = pytest.importorskip("grimp")  # comes with import-linter (the dev extra)
    graph = grimp.build_graph("backend", cache_dir=None, exclude_type_checking_imports=False)
    for module in {"backend.settings", *graph.find_descendants("backend.settings")}:
        assert graph.find_shortest_chain(importer=module, imported="backend.apikey") is None, module


# Readers use the typed sections (settings.server_cfg.port); the checked dicts are walked by name only
# where a table of names drives the walk: the launch's version rules (FLAG_RULES).
_DICT_READ = __import__("re").compile(r"\.(server|console|planner|chat)(\[|\.get\()")
_ALLOWED = {("backend/server/launch.py", "settings.server.get(rule.key)")}


def test_no_reader_outside_the_settings_reads_them_by_string_key():
    from tests.helpers import ROOT

    found = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("backend/settings/"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _DICT_READ.search(line) and not any(rel == f and text in line for f, text in _ALLOWED):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "read the typed section instead (settings.server_cfg.KEY):\n" + "\n".join(found)
