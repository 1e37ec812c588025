"""What the settings screen shows and does, without the screen: one row per SCHEMA key, values as
TOML text, where a save goes, what this run overrides (--demo, --set), and what needs a restart.

Saves go to the file the console was started with (Settings.source), or to the XDG config file
when it was started without one. Everything here is blocking and quick; `apply_edit` writes a
file, so the console calls it from a worker thread.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from backend import demo as demo_model
from backend import paths
from backend.errors import ConfigError
from backend.profile_overlays import overlay_of
from backend.server.status import RUNNING, in_group
from backend.settings import (
    SCHEMA,
    Key,
    Settings,
    apply_demo,
    check_value,
    load,
    parse_override,
    read_toml,
    remove_setting,
    save_setting,
    type_name,
)

_MISSING = object()
# A secret key (its spec says so) is shown masked: never drawn on the screen, put in the editor or in a message.
MASK = "•••••• (set)"


def toml_text(value: Any) -> str:
    """A value in the TOML form `--set` accepts; '' for None (not set: the key is not written)."""
    import tomlkit  # tomlkit only to write a file (reads use tomllib): start-up

    if value is None:
        return ""
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        table.update(value)
        return table.as_string()
    return str(tomlkit.item(value).as_string())


def type_text(spec: Key) -> str:
    return type_name(spec.type)


def _spec(section: str, key: str) -> Key | None:
    return SCHEMA.get(section, {}).get(key)


def is_secret(section: str, key: str) -> bool:
    spec = _spec(section, key)
    return spec is not None and spec.secret


def needs_restart(section: str, key: str) -> bool:
    """Whether a change reaches a running server only when it restarts (the launch argv, its
    environment, or what the supervisor reads when it starts)."""
    spec = _spec(section, key)
    return spec is not None and spec.needs_restart


def effect(section: str, key: str) -> str:
    """When a saved change is used, in words."""
    spec = _spec(section, key)
    if spec is not None and spec.needs_restart:
        return "on the next server start or restart"
    if spec is not None and spec.applies == "console-start":
        return "when the console starts again"
    if section == "planner":
        return "now: the plan is computed again"
    if section == "chat":
        return "on the next chat request"
    return "now"


def config_target(settings: Settings) -> Path:
    """The file a save writes: in --demo the demo's settings file (state dir; only --demo runs read
    it, over the demo's own values); else the one this console read, else the XDG config file
    (which the next start finds when there is no ./config.toml)."""
    if settings.demo:
        return demo_model.settings_path()
    return Path(settings.source) if settings.source else paths.config_dir() / "config.toml"


def target_name(settings: Settings) -> str:
    """What the file a save writes is, in words."""
    return "the demo settings file" if settings.demo else "the file"


def set_keys(settings: Settings) -> dict[tuple[str, str], str]:
    """(section, key) -> the --set text that overrides it for this run."""
    out: dict[tuple[str, str], str] = {}
    for text in settings.overrides:
        try:
            section, key, _ = parse_override(text)
        except ConfigError:
            continue
        out[(section, "env" if key.startswith("env.") else key)] = text
    return out


def demo_keys(settings: Settings) -> set[tuple[str, str]]:
    """(section, key) pairs --demo replaces, whatever the user's file says (its own settings file
    aside: that is where the console's edits in --demo go, so they are not forced)."""
    if not settings.demo:
        return set()
    marker = object()
    values: dict[str, dict[str, Any]] = {sec: {k: marker for k in table} for sec, table in SCHEMA.items()}
    apply_demo(values, with_file=False)
    return {(sec, k) for sec, table in values.items() for k, v in table.items() if v is not marker}


def profile_keys(settings: Settings) -> set[tuple[str, str]]:
    """(section, key) pairs the active workload profile sets for this run."""
    name = getattr(settings, "profile", None)
    if not name:
        return set()

    return {("server", k) for k in overlay_of((settings.profiles or {}).get(name, {}))}


def file_data(path: Path) -> dict[str, Any]:
    """The file's own tables ({} when it does not exist yet). Raises ConfigError."""
    return read_toml(path) if path.is_file() else {}


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    spec: Key
    value: Any  # this run's value
    file_value: Any  # the value written in the file; _MISSING when absent
    source: str  # "default", "file", "demo", "profile" or "--set"
    override: str = ""  # the --set text, for source "--set"
    where: str = "the file"  # what the file a save writes is (target_name)

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def default(self) -> Any:
        return self.spec.default

    @property
    def in_file(self) -> bool:
        return self.file_value is not _MISSING

    @property
    def modified(self) -> bool:
        return bool(self.value != self.spec.default)

    @property
    def forced(self) -> bool:
        """This run keeps its value whatever a save writes (a demo value is not: in --demo saves go
        to the demo settings file, which is read over the demo's values)."""
        return self.source in ("profile", "--set")

    @property
    def secret(self) -> bool:
        return self.spec.secret

    @property
    def value_text(self) -> str:
        if self.secret and self.value:
            return MASK
        return toml_text(self.value) if self.value is not None else "(unset)"

    @property
    def file_text(self) -> str:
        """The value written in the file (masked for a secret), or 'not set'."""
        if not self.in_file:
            return "not set"
        return MASK if self.secret and self.file_value else toml_text(self.file_value)

    @property
    def default_text(self) -> str:
        return toml_text(self.default) if self.default is not None else "(unset)"

    @property
    def edit_text(self) -> str:
        """What the editor starts with: the file's value, since that is what a save changes; a
        value forced by --set or a profile is never offered for saving (the demo's values are: its
        edits go to the demo settings file). A secret starts empty (type a
        new one; empty removes it)."""
        if self.secret:
            return ""
        if self.forced:
            return toml_text(self.file_value if self.in_file else self.default)
        return toml_text(self.value)

    @property
    def choices_text(self) -> str:
        if self.spec.choices:
            return " | ".join(toml_text(c) for c in self.spec.choices)
        return ""

    @property
    def restart(self) -> bool:
        return needs_restart(self.section, self.key)

    @property
    def source_text(self) -> str:
        if self.source == "--set":
            return f"this run: --set {self.override}"
        if self.source == "demo":
            return "the demo's value (--demo)"
        if self.source == "profile":
            return f"this run: {self.override}"
        return f"from {self.where}" if self.source == "file" else "default"


def build_rows(settings: Settings, data: dict[str, Any] | None = None) -> list[Row]:
    """Every SCHEMA key, in schema order (server, console, planner, chat)."""
    if data is None:
        data = file_data(config_target(settings))
    sets, demo = set_keys(settings), demo_keys(settings)
    profile = profile_keys(settings)
    where = target_name(settings)
    rows = []
    for section, table in SCHEMA.items():
        current = getattr(settings, section)
        table_data = data.get(section)
        written: dict[str, Any] = table_data if isinstance(table_data, dict) else {}
        for key, spec in table.items():
            if (section, key) in sets:
                source = "--set"
            elif (section, key) in profile:
                source = "profile"
            elif key in written:  # in --demo, `written` is the demo settings file, read over the demo
                source = "file"
            else:
                source = "demo" if (section, key) in demo else "default"
            rows.append(Row(section, key, spec, current.get(key), written.get(key, _MISSING), source,
                            sets.get((section, key), "") or (f"profile {settings.profile}"
                                                             if source == "profile" else ""), where))
    return rows


def overrides_text(settings: Settings) -> list[str]:
    """What this run overrides, one line each, for the screen's header."""
    lines = []
    demo = demo_keys(settings)
    if demo:
        other = sorted(f"{s}.{k}" for s, k in demo if s != "server")
        lines.append("--demo replaces all of [server]" + (f" and {', '.join(other)}" if other else "")
                     + "; saves go to the demo settings file, which only --demo runs read")
    if getattr(settings, "profile", None):
        keys = sorted(k for _, k in profile_keys(settings))
        lines.append(f"profile {settings.profile} sets {', '.join(keys) or 'nothing'} for this run (p picks "
                     "another); saves still go to the file's [server]")
    sets = set_keys(settings)
    if sets:
        lines.append("--set for this run: " + ", ".join(sets.values()))
    return lines


@dataclass(frozen=True)
class Edit:
    section: str
    key: str
    value: Any
    unset: bool  # remove the key from the file (its default applies)


def parse_text(section: str, key: str, text: str) -> Edit:
    """The editor's text as `--set` reads it, validated. Empty text removes the key from the file
    (type "" for an empty string). Raises ConfigError with a message fit for the user."""
    spec = SCHEMA.get(section, {}).get(key)
    if spec is None:
        raise ConfigError(f"unknown setting {section}.{key}")
    raw = text.strip()
    if not raw:
        if spec.type is dict:
            return Edit(section, key, {}, False)
        return Edit(section, key, None, True)
    _, _, value = parse_override(f"{section}.{key}={raw}")
    if isinstance(value, str) and raw.startswith(("[", "{", '"', "'")):
        # a bracket or quote that did not parse as TOML: say so, not "must be a list, got str"
        try:
            tomllib.loads(f"v = {raw}")
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{section}.{key}: not a TOML value: {e}") from None
    return Edit(section, key, check_value(section, key, value), False)


def save_edit(path: Path, edit: Edit) -> None:
    """Write one edit into the file: comment-preserving (tomlkit) and atomic; journalled with
    the value it had in the file and the new one."""
    import tomllib  # only for a save: the diff the journal keeps

    from backend.events import record_event  # only for a save

    try:
        was = tomllib.loads(path.read_text(encoding="utf-8")).get(edit.section, {}).get(edit.key)
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        was = None
    _write_edit(path, edit)
    now = None if edit.unset else edit.value
    if was is None and now is None:
        return  # a key the file did not hold, removed: nothing changed, nothing to journal
    record_event("settings", f"saved in {path}", diff={f"{edit.section}.{edit.key}": [was, now]})


def _write_edit(path: Path, edit: Edit) -> None:
    if edit.unset:
        remove_setting(path, edit.section, edit.key)
    else:
        save_setting(path, edit.section, edit.key, edit.value)


def reload(settings: Settings, path: Path | None = None) -> Settings:
    """The same run's settings read again: the same file (or `path`), --demo and --set."""
    target = path or (Path(settings.source) if settings.source else None)
    config = str(target) if target is not None and target.is_file() else None
    return load(config=config, demo=settings.demo, overrides=list(settings.overrides),
                profile=getattr(settings, "profile", None))


@dataclass
class Saved:
    path: Path
    dotted: str
    text: str  # the saved value as TOML ('' when removed)
    settings: Settings  # reloaded
    restart: bool  # the change reaches a running server only on restart
    note: str  # what the user should know, in one line


def apply_edit(settings: Settings, section: str, key: str, text: str) -> Saved:
    """Validate, save into the config file, and load the settings again. Raises ConfigError
    (and then writes nothing) for a bad value or an unreadable file."""
    edit = parse_text(section, key, text)
    path = config_target(settings)
    held = edit.unset and _in_file(path, section, key)
    save_edit(path, edit)
    new = reload(settings) if settings.demo else reload(settings, path)
    dotted = f"{section}.{key}"
    secret = is_secret(section, key)
    where = f"{path}" + (" (the demo settings file)" if settings.demo else "")
    if edit.unset:
        # what applies now, from the reloaded settings: in the demo that is the demo's own value,
        # not "the default" (a removal there once said so, and saved nothing)
        unset = "unset: vLLM's own default" if section == "server" else "unset"
        now = MASK if secret else (toml_text(getattr(new, section).get(key)) or unset)
        note = (f"{dotted} removed from {where}; now {now}" if held
                else f"{dotted} is not in {where}: nothing removed; it stays {now}")
    else:
        note = f"{dotted} = {MASK if secret else toml_text(edit.value)}, saved to {where}"
    forced = (set_keys(settings).get((section, key))
              or ((section, key) in profile_keys(settings) and f"profile {settings.profile}"))
    changed = held or not edit.unset
    if forced:
        kept = MASK if secret else (toml_text(getattr(new, section).get(key)) or "(unset)")
        note += f"; this run keeps {kept} ({forced})"
    elif changed:
        note += f"; used {effect(section, key)}"
    return Saved(path, dotted, "" if edit.unset else (MASK if secret else toml_text(edit.value)), new,
                 changed and needs_restart(section, key) and not forced, note)


def _in_file(path: Path, section: str, key: str) -> bool:
    """Whether the file sets section.key (a removal of a key it does not set writes nothing)."""
    import tomllib  # only for a removal

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    table = data.get(section)
    return isinstance(table, dict) and key in table


def offer_restart(saved: Saved, server_state: str | None) -> bool:
    """Whether to offer a restart now: the change needs one and a server runs."""
    return saved.restart and in_group(server_state, RUNNING)
