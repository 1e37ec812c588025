"""Property-based tests (hypothesis) over what a user or another program can hand qwen-tui: the
config file, the state file, `--set` values and the settings editor. Every invalid input is a
ConfigError naming the key (and the file:line for files), exit code 2, never a traceback; a saved
file is the old one or the new valid one, with its comments."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend import settings as S
from backend.cli import main
from backend.server import client as supervisor_client
from backend.server import statefile
from backend.server.status import STATES
from backend.setting_rows import apply_edit

FUZZ = settings(max_examples=int(os.environ.get("QWEN_TUI_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

KEYS = [(sec, k) for sec, table in S.SCHEMA.items() for k in table]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                                          max_size=3),
                           max_leaves=6)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(v), repr(v))
    if isinstance(v, (int,)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


toml_values = st.one_of(st.booleans(), st.integers(-2**64, 2**64), st.floats(), st.text(max_size=10),
                        st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3))
lines = st.one_of(
    st.sampled_from(["[server]", "[console]", "[planner]", "[chat]", "[server.env]", "[bogus]", "# a comment",
                     "", "[[server]]", "server = 1", "= 3", "[server"]),
    st.builds(lambda kv, v: f"{kv[1]} = {_toml_value(v)}", st.sampled_from(KEYS), toml_values),
    st.builds(lambda name, v: f"{name} = {_toml_value(v)}", st.from_regex(r"[A-Za-z0-9_\-]{0,6}", fullmatch=True),
              toml_values),
    st.text(max_size=20),
)


def _check_config_error(e: S.ConfigError, where: str) -> None:
    text = str(e)
    assert text.startswith(where), text
    assert "Traceback" not in text


@FUZZ
@given(st.lists(lines, max_size=12), st.binary(max_size=8))
def test_any_config_file_loads_or_is_a_config_error_naming_the_file(body, tail):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.toml"
        path.write_bytes("\n".join(body).encode("utf-8", "surrogatepass") + b"\n" + tail)
        try:
            s = S.load(config=str(path))
        except S.ConfigError as e:
            _check_config_error(e, str(path))
            return
        for section, table in S.SCHEMA.items():
            for key in table:
                value = getattr(s, section)[key]
                if value is not None:
                    S.check_value(section, key, value)  # whatever loaded is valid


@FUZZ
@given(st.sampled_from(KEYS + [("server", "env.X"), ("server", "env."), ("nope", "x"), ("server", "")]),
       st.text(max_size=20))
def test_any_set_value_is_accepted_valid_or_refused_naming_the_key(key, raw):
    text = f"{key[0]}.{key[1]}={raw}"
    try:
        s = S.load(overrides=[text])
    except S.ConfigError as e:
        assert str(e).startswith("--set")
        return
    section, name = key
    if name.startswith("env."):
        assert isinstance(s.server["env"], dict)
    else:
        value = getattr(s, section)[name]
        if value is not None:
            S.check_value(section, name, value)


state_files = st.one_of(
    st.dictionaries(st.sampled_from(sorted(statefile.FIELDS)), json_values, max_size=8),
    st.dictionaries(st.sampled_from(["supervisor_pid", "supervisor_create_time", "state", "pid", "pgid",
                                     "started_at", "log_path", "settings", "reaping_pids"]),
                    st.one_of(json_values, st.integers(-3, 3), st.sampled_from(STATES)), max_size=9),
    json_values,
)


@FUZZ
@given(state_files, st.sampled_from([None, b"", b"\xff\xfe", b"{", b"[]"]))
def test_any_state_file_is_read_or_untrusted_never_a_traceback(data, raw):
    with tempfile.TemporaryDirectory() as d:
        os.environ["QWEN_TUI_HOME"] = d
        try:
            path = statefile.state_path()
            path.parent.mkdir(parents=True)
            text = raw if raw is not None else json.dumps(data, allow_nan=True).encode()
            path.write_bytes(text)
            path.chmod(0o600)
            live, why = statefile.read_live(cleanup=False)
            assert live is None or isinstance(live["supervisor_pid"], int)
            st_ = supervisor_client.status()
            assert st_["state"] in STATES
            json.dumps(st_, default=str)
            ok, msg = supervisor_client.stop(timeout=0.2)
            assert isinstance(msg, str)
        finally:
            os.environ.pop("QWEN_TUI_HOME", None)


COMMENTED = """# qwen-tui test config: this comment must survive every save
[server]
port = 8001  # the port comment
[console]
# console comment
stop_timeout = 10
"""


@FUZZ
@given(st.sampled_from(KEYS), st.one_of(st.text(max_size=16), toml_values.map(_toml_value)))
def test_the_settings_editor_saves_a_valid_file_or_leaves_the_old_one(key, text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.toml"
        path.write_text(COMMENTED)
        s = S.load(config=str(path))
        section, name = key
        try:
            apply_edit(s, section, name, text)
        except S.ConfigError as e:
            assert path.read_text() == COMMENTED, "a refused edit changed the file"
            assert f"{section}.{name}" in str(e) or str(path) in str(e) or "TOML" in str(e), str(e)
            return
        new = path.read_text()
        assert "this comment must survive every save" in new and "# console comment" in new
        S.load(config=str(path))  # the new file loads


def test_a_bad_set_exits_2_without_a_traceback(capsys):
    for text in ("console.stop_timeout=-1", "server.env.=1", "server.model=", "chat.temperature=nan"):
        assert main(["--set", text, "print-command"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and text.split("=")[0].replace("server.env.", "server.env") in err
