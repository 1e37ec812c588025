"""Checking what a config file holds against the spec (backend/settings/spec.py), and reading TOML
with messages that name file:line."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from backend import profile_overlays
from backend.errors import ConfigError
from backend.settings.spec import SCHEMA, range_words

# Sections with a parser of their own: [cluster] and [[cluster.box]] (backend/cluster/config.py).
OWN_SECTIONS = ("cluster",)
_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "true/false", list: "list", dict: "table"}


def range_text(section: str, key: str) -> str:
    spec = SCHEMA.get(section, {}).get(key)
    return range_words(spec.range if spec else None)


def type_name(t: type | tuple[type, ...]) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join(dict.fromkeys(_TYPE_NAMES.get(x, x.__name__) for x in ts))


def check_value(section: str, key: str, value: Any) -> Any:
    """Validate one value against the schema; returns it (ints widened to float where needed)."""
    table = SCHEMA.get(section)
    if table is None:
        raise ConfigError(f"unknown section [{section}] (known: {', '.join(SCHEMA)})")
    spec = table.get(key)
    if spec is None:
        hint = " (pass other vllm flags with server.extra_args)" if section == "server" else ""
        raise ConfigError(f"unknown setting {section}.{key}{hint}")
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        name = type_name(spec.type)
        raise ConfigError(f"{section}.{key} must be {'an' if name[0] in 'aeiou' else 'a'} {name}, "
                          f"got {type(value).__name__} {value!r}")
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{section}.{key} = {value!r} is not one of {', '.join(map(str, spec.choices))}")
    if spec.check is not None:
        value = spec.check(value)
    low, high = spec.range or (None, None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or (low is not None and value < low) or (high is not None and value > high):
            raise ConfigError(f"{section}.{key} = {value!r} is out of range: must be {range_text(section, key)}")
    if spec.non_empty and isinstance(value, str) and not value.strip():
        raise ConfigError(f"{section}.{key} may not be empty" + (" (the model to serve: a HF repo id or a "
                                                                  "local directory)" if key == "model" else ""))
    return value


def defaults() -> dict[str, dict[str, Any]]:
    return {sec: {k: copy.deepcopy(s.default) for k, s in table.items()}
            for sec, table in SCHEMA.items()}




def locate(text: str | None, section: str, key: str | None = None) -> int | None:
    """The line (1-based) of `key` in `[section]` (or of the section header), for messages."""
    if not text:
        return None
    current, header = None, None
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        m = re.match(r"\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(#.*)?$", stripped)
        if m and not stripped.startswith("[["):
            current = m.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if current == section and header is None:
                header = n
            if key and current == f"{section}.{key}":
                return n  # a sub-table such as [server.env]
            continue
        if key is None or current != section:
            continue
        if re.match(rf"[\"']?{re.escape(key)}[\"']?\s*[=.]", stripped):
            return n
    return header


def merge(base: dict[str, dict[str, Any]], data: dict[str, Any], where: str, text: str | None = None) -> None:
    for section, table in data.items():
        def at(section: str = section) -> str:  # the section's line: looked up for a message only
            return f"{where}:{locate(text, section) or 1}"

        if not isinstance(table, dict):
            raise ConfigError(f"{at()}: '{section}' must be a table like [{section}]")
        if section in OWN_SECTIONS:
            continue  # read and checked by its own module
        if section == "profiles":  # [profiles.NAME]: overlays of [server] keys (backend/profiles.py)

            for name, overlay in table.items():
                try:
                    base.setdefault("profiles", {}).update(check_profiles({name: overlay}))
                except ConfigError as e:
                    line = locate(text, f"profiles.{name}") or locate(text, section)
                    raise ConfigError(f"{where}:{line or 1}: {e}") from None
            continue
        if section not in SCHEMA:
            known = ", ".join([*SCHEMA, "profiles", *OWN_SECTIONS])
            raise ConfigError(f"{at()}: unknown section [{section}] (known: {known})")
        for key, value in table.items():
            try:
                base[section][key] = check_value(section, key, value)
            except ConfigError as e:
                line = locate(text, section, key)
                raise ConfigError(f"{where}:{line}: {e}" if line else f"{where}: {e}") from None




def decode(raw: bytes, path: Path | str) -> str:
    """UTF-8 text of a config file, or a ConfigError naming file:line:column of the bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{path}:{line}:{col}: not UTF-8 (byte 0x{raw[e.start]:02x}); "
                          "save the file as UTF-8") from None


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        at = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        raise ConfigError(f"{at}: not valid TOML: {e}") from None
    except (RecursionError, ValueError) as e:
        raise ConfigError(f"{path}: not valid TOML: {str(e)[:120]}") from None


def read_toml_text(path: Path) -> tuple[dict[str, Any], str]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    text = decode(raw, path)
    return parse_toml(text, path), text


def read_toml(path: Path) -> dict[str, Any]:
    return read_toml_text(path)[0]


def check_profiles(table: Any, where: str = "") -> dict[str, dict[str, Any]]:
    """The file's [profiles] table validated: {name: {server key: value, description?}}.
    Raises ConfigError naming the profile and key."""
    at = f"{where}: " if where else ""
    if not isinstance(table, dict):
        raise ConfigError(f"{at}'profiles' must be tables like [profiles.chat]")
    out: dict[str, dict[str, Any]] = {}
    for name, overlay in table.items():
        if not profile_overlays.NAME.match(str(name)):
            raise ConfigError(f"{at}profile name {name!r}: letters, digits, _ and - only")
        if not isinstance(overlay, dict):
            raise ConfigError(f"{at}profiles.{name} must be a table like [profiles.{name}] of [server] keys")
        clean: dict[str, Any] = {}
        for key, value in overlay.items():
            if key == "description":
                if not isinstance(value, str):
                    raise ConfigError(f"{at}profiles.{name}.description must be a string")
                clean[key] = value
                continue
            try:
                clean[key] = check_value("server", key, value)
            except ConfigError as e:
                raise ConfigError(f"{at}profiles.{name}: {e}") from None
        out[str(name)] = clean
    return out


