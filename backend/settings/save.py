"""Saving one key into the user's file: comment-preserving (tomlkit), checked, and atomic."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from backend.errors import ConfigError
from backend.settings.check import check_value, decode, defaults, merge, parse_toml


def save_setting(path: Path, section: str, key: str, value: Any) -> None:
    """Change one key in the user's file, keeping comments and order; written atomically.

    The new value is validated first and the whole new text is re-read before it replaces the
    old file, so a failure leaves the old file untouched. A table value ([server.env]) is changed
    name by name, so the comments inside the table survive too.
    """
    import tomlkit  # tomlkit only to write a file (reads use tomllib): start-up

    value = check_value(section, key, value)

    def change(doc: Any) -> bool:
        if section not in doc:
            doc.add(section, tomlkit.table())
        if not isinstance(value, dict):
            doc[section][key] = value
            return True
        if key not in doc[section] or not isinstance(doc[section][key], dict):
            doc[section][key] = tomlkit.table()
        table = doc[section][key]
        for name in [n for n in table if n not in value]:
            del table[name]
        for name, v in value.items():
            if name not in table or table[name] != v:
                table[name] = v
        return True

    _edit_file(path, change)


def remove_setting(path: Path, section: str, key: str) -> None:
    """Take one key out of the user's file (its default applies); comments kept, atomic."""

    def change(doc: Any) -> bool:
        if section in doc and key in doc[section]:
            del doc[section][key]
            return True
        return False

    _edit_file(path, change)


def writable_problem(path: Path) -> str | None:
    """Why `path` must not be replaced by a save (read-only for its owner, or not writable by us)."""
    if not path.exists():
        return None
    mode = path.stat().st_mode
    if not mode & stat.S_IWUSR or not os.access(path, os.W_OK):
        return (f"{path} is read-only (mode {stat.S_IMODE(mode):04o}): not saved; make it writable "
                f"(chmod u+w {path}) to save from here, or edit it by hand")
    return None


def _holds_key(data: dict[str, Any]) -> bool:
    server = data.get("server")
    return isinstance(server, dict) and bool(server.get("api_key"))


def _edit_file(path: Path, change: Callable[[Any], bool]) -> None:
    """Parse the file with tomlkit, apply `change(doc)` (False: nothing to write), check that the
    new text loads, and replace the file atomically. A read-only file is refused, never replaced;
    a file that holds server.api_key is written user-only (0600)."""
    import tomlkit  # tomlkit only to write a file (reads use tomllib): start-up

    problem = writable_problem(path)
    if problem:
        raise ConfigError(problem)
    text = decode(path.read_bytes(), path) if path.exists() else ""
    try:
        doc = tomlkit.parse(text)
    except Exception as e:  # tomlkit raises its own ParseError subclasses
        raise ConfigError(f"{path}: not valid TOML, not saving: {e}") from None
    if not change(doc):
        return
    new_text = tomlkit.dumps(doc)
    data = parse_toml(new_text, path)
    merge(defaults(), data, str(path), new_text)  # never write a file we could not read
    atomic_write(path, new_text, mode=0o600 if _holds_key(data) else None)


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Replace `path` with `text` (temp file + rename). `mode`: the new file's permissions;
    None keeps the old file's (0600 for a new one is up to the caller)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
