"""Building one run's settings: defaults < the file < --demo < the profile < --set.

Lookup order of the file: --config PATH, $QWEN_TUI_CONFIG, ./config.toml, the XDG config dir.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from backend import demo as demo_settings  # the name `demo` is load()'s flag
from backend import paths, profile_overlays
from backend.errors import ConfigError
from backend.settings.check import check_value, defaults, merge, read_toml_text
from backend.settings.model import Settings
from backend.settings.spec import ENV_NAME, SCHEMA


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, typed value). Values are TOML; bare words are strings."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted, raw = text.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) == 3 and parts[0] == "server" and parts[1] == "env":
        if not ENV_NAME.match(parts[2]):
            raise ConfigError(f"--set {text!r}: {parts[2]!r} is not a valid environment variable name "
                              "(letters, digits and _, not starting with a digit)")
        return "server", f"env.{parts[2]}", raw
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. server.port=8001")
    section, key = parts
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    spec = SCHEMA.get(section, {}).get(key)
    if spec is not None and isinstance(value, (int, float, bool)) and spec.type is str:
        value = raw.strip()
    return section, key, value


def _not_a_file(p: Path) -> str:
    """Why a config path is not a file to read, in words."""
    if p.is_dir():
        return "is a directory: give the config.toml inside it"
    return "does not exist" if not p.exists() else "is not a regular file"


def find_config(explicit: str | None = None) -> Path | None:
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(f"config file {p} {_not_a_file(p)}")
        return p
    env = os.environ.get("QWEN_TUI_CONFIG")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(f"$QWEN_TUI_CONFIG points to {p}, which {_not_a_file(p)}")
        return p
    for p in (Path.cwd() / "config.toml", paths.config_dir() / "config.toml"):
        if p.is_file():
            return p
    return None



def apply_demo(values: dict[str, dict[str, Any]], with_file: bool = True) -> None:
    """--demo: the server settings are the demo's (backend/demo.py) over the defaults, whatever the
    file says; the planner plans for the CPU, chat replies are short; console settings are kept."""
    values["server"] = {**defaults()["server"], **demo_settings.server_overlay()}
    values["planner"].update(demo_settings.PLANNER_OVERLAY)
    values["chat"].update(demo_settings.CHAT_OVERLAY)
    path = demo_settings.settings_path()
    if with_file and path.is_file():  # the console's edits in --demo (they never go into the user's file)
        data, text = read_toml_text(path)
        data = {k: v for k, v in data.items() if k in SCHEMA}  # it holds settings, not profiles
        merge(values, data, str(path), text)


def load(config: str | None = None, demo: bool = False, overrides: list[str] | None = None,
         profile: str | None = None) -> Settings:
    """Build the settings for one run. Raises ConfigError with a message fit for the user.
    Precedence: defaults < the file < --demo (and its settings file) < the profile ([profiles.NAME]) < --set."""
    values = defaults()
    path = find_config(config)
    if path is not None:
        data, text = read_toml_text(path)
        merge(values, data, str(path), text)
    known = profile_overlays.merged(values.pop("profiles", None))
    if demo:
        apply_demo(values)
        known = copy.deepcopy(demo_settings.PROFILES)  # the file's (and built-in) ones are sized for a GPU box
    if profile:
        if profile not in known:
            raise ConfigError(f"--profile {profile}: {profile_overlays.unknown(profile, known)}")
        profile_overlays.apply(values["server"], known[profile])
    for text in overrides or []:
        section, key, value = parse_override(text)
        if key.startswith("env."):
            try:
                values["server"]["env"] = check_value("server", "env",
                                                      dict(values["server"]["env"], **{key[4:]: value}))
            except ConfigError as e:
                raise ConfigError(f"--set {text}: {e}") from None
            continue
        try:
            values[section][key] = check_value(section, key, value)
        except ConfigError as e:
            raise ConfigError(f"--set {text}: {e}") from None
    return Settings(server=values["server"], console=values["console"],
                    planner=values["planner"], chat=values["chat"], source=path, demo=demo,
                    overrides=list(overrides or []), profile=profile or None, profiles=known)


