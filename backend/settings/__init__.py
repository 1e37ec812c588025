"""Settings: one spec per key, read with tomllib, saved with tomlkit (comments survive).

`[server]` keys are `vllm serve` flags with dashes turned into underscores. `[server.env]` is the
server's environment, `server.extra_args` is passed through verbatim. `[console]`, `[planner]` and
`[chat]` are the console's own settings.

    spec.py   every key's facts: the typed sections (ServerSettings ...) whose fields carry a Key
    check.py  a value against its Key; TOML read with file:line messages
    load.py   one run's settings: defaults < file < --demo < profile < --set
    save.py   one key written into the user's file, comments kept, atomically
    model.py  Settings: the checked dicts and their typed sections
"""

from __future__ import annotations

from backend.errors import ConfigError
from backend.settings.check import (
    OWN_SECTIONS,
    check_profiles,
    check_value,
    decode,
    defaults,
    locate,
    merge,
    parse_toml,
    range_text,
    read_toml,
    read_toml_text,
    type_name,
)
from backend.settings.load import apply_demo, find_config, load, parse_override
from backend.settings.model import Settings
from backend.settings.save import atomic_write, remove_setting, save_setting, writable_problem
from backend.settings.spec import (
    CHAT,
    CONSOLE,
    ENV_NAME,
    PLANNER,
    SCHEMA,
    SECTIONS,
    SERVER,
    ChatSettings,
    ConsoleSettings,
    Key,
    PlannerSettings,
    ServerSettings,
    from_values,
)

__all__ = [
    "CHAT", "CONSOLE", "ENV_NAME", "OWN_SECTIONS", "PLANNER", "SCHEMA", "SECTIONS", "SERVER", "ChatSettings",
    "ConfigError", "ConsoleSettings", "Key", "PlannerSettings", "ServerSettings", "Settings", "apply_demo",
    "atomic_write", "check_profiles", "check_value", "decode", "defaults", "find_config", "from_values", "load",
    "locate", "merge", "parse_override", "parse_toml", "range_text", "read_toml", "read_toml_text",
    "remove_setting", "save_setting", "type_name", "writable_problem",
]
