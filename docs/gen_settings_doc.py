"""docs/settings.md from the spec of each key (backend/settings/spec.py: type, default, range, when it
applies, how it becomes a vLLM flag, secret), in the words the settings screen uses (backend/setting_rows.py).

    python docs/gen_settings_doc.py          # rewrite docs/settings.md
    python docs/gen_settings_doc.py --check  # exit 1 if it is not current (tests/unit/test_docs.py)
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend import profile_overlays, setting_rows, settings  # noqa: E402
from backend.server import launch  # noqa: E402

OUT = ROOT / "docs" / "settings.md"
WIDTH = 118

SECTIONS = {
    "server": "`vllm serve`'s flags, dashes as underscores; a key left unset is not passed (vLLM's default applies).",
    "console": "the console's and the supervisor's own settings.",
    "planner": "the card `qwen-tui plan` plans for when NVML cannot see one.",
    "chat": "what a new chat starts from (each conversation keeps its own copy: `ctrl+s`).",
}


def _toml(value: object) -> str:
    text = setting_rows.toml_text(value)
    return f"`{text}`" if text else "not set"


def _flag(key: str, spec: settings.Key) -> str:
    if spec.flag == "none":
        return spec.via
    flag = launch._flag(key)
    if spec.type is bool:
        return f"`{flag}`" + (f" / `--no-{flag[2:]}`" if spec.flag == "negatable" else " when true")
    return f"`{flag} VALUE`"


def _entry(section: str, key: str, spec: settings.Key) -> str:
    kind = "number" if spec.type == (int, float) else setting_rows.type_text(spec)
    facts = [kind, f"default {_toml(spec.default)}"]
    if spec.choices:
        facts.append("one of " + ", ".join(f"`{c}`" for c in spec.choices))
    allowed = settings.range_text(section, key)
    if allowed:
        facts.append(allowed)
    if spec.non_empty:
        facts.append("not empty")
    if spec.secret:
        facts.append("secret: shown as `<hidden>`")
    text = f"- **`{section}.{key}`**: {spec.help}. " + "; ".join(facts) + "."
    text += f" Applies {setting_rows.effect(section, key)}."
    if section == "server":
        text += f" vLLM: {_flag(key, spec)}."
    return textwrap.fill(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def render() -> str:
    out = ["# Settings reference", "",
           "Generated from the spec of each key in `backend/settings/spec.py` by `python docs/gen_settings_doc.py`;",
           "`tests/unit/test_docs.py` fails when it is not current. How the file is found, checked and saved:",
           "[configuration.md](configuration.md).", "",
           "Each key is set in `config.toml` (`[section]`, then `key = value`), for one run with",
           "`--set section.key=value` (same checks), or from the console's settings screen (`e`).", ""]
    for section, table in settings.SCHEMA.items():
        out += [f"## [{section}]", "", SECTIONS.get(section, ""), ""]
        out += [_entry(section, key, spec) for key, spec in table.items()]
        out.append("")
    out += ["## [profiles.NAME]", "",
            "Named overlays of `[server]` keys (`--profile NAME`); a table of the same name in the file replaces the",
            "built-in one. `description` is the one key that is not a `[server]` key. Built in:", ""]
    for name, profile in profile_overlays.BUILTIN.items():
        overlay = profile_overlays.overlay_of(profile)
        keys = ", ".join(f"`{k} = {setting_rows.toml_text(v)}`" for k, v in overlay.items())
        out.append(f"- **`{name}`**: {profile.get('description', '')} ({keys}).")
    out += ["", "## [cluster]", "",
            "Several boxes behind a router: its own parser (`backend/cluster/config.py`); see [cluster.md](cluster.md)",
            "and the commented example at the end of `config.toml`.", ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is not current: run python docs/gen_settings_doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
