"""The wheel (what `pip install .`, pipx and `uv tool install` install from a clone) carries what the
console needs: the themes, the .tcss files, the example config. Built once from a copy of the
project's files, installed with --target beside this venv's dependencies, and started from there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("backend", "tui", "themes", "config.toml", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, folder it is installed in, environment that runs it from there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SHIPPED:  # a copy: the build's build/ and egg-info stay out of the work tree
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                        if (ROOT / name).is_dir() else {}))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp / "dist")], cwd=src, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp / "dist").glob("qwen_tui-*.whl")
    target = tmp / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                          str(wheel)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN_TUI_CONFIG")}
    env.update(PYTHONPATH=str(target), QWEN_TUI_HOME=str(tmp / "home"))
    return wheel, target, env


def _run(env, *code_or_args, cwd):
    return subprocess.run([sys.executable, *code_or_args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_wheel_holds_the_themes_the_styles_and_the_example(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tui/_themes/qwen-dark.toml", "tui/_themes/qwen-light.toml", "backend/_example/config.toml",
            "tui/app.tcss", "tui/screens/main.tcss"} <= names
    assert not any(n.startswith(("tests/", "themes/")) for n in names)
    # backend._example is the repo's top folder mapped for config.toml: nothing else of it ships
    assert [n for n in names if n.startswith("backend/_example/")] == ["backend/_example/config.toml"]


def test_the_console_starts_from_the_wheel_with_its_theme(installed, tmp_path):
    _, target, env = installed
    out = _run(env, "-m", "tui.entry", "--help", cwd=tmp_path)
    assert out.returncode == 0 and "usage: qwen-tui" in out.stdout, out.stderr
    probe = ("import tui, textual.app, tui.themes as t; a = textual.app.App();"
             "print(tui.__file__); print(t.register_themes(a, 'qwen-dark')); print(a.theme)")
    out = _run(env, "-c", probe, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    where, problems, theme = out.stdout.splitlines()
    assert where.startswith(str(target))  # the installed copy ran, not the clone
    assert (problems, theme) == ("[]", "qwen-dark")  # no "theme 'qwen-dark' not found; using …"


def test_init_config_writes_the_example_once(installed, tmp_path):
    _, _, env = installed
    out = _run(env, "-m", "tui.entry", "init-config", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = Path(env["QWEN_TUI_HOME"]) / "config" / "config.toml"
    assert f'"written": "{written}"' in out.stdout
    assert written.read_text() == (ROOT / "config.toml").read_text()
    again = _run(env, "-m", "tui.entry", "init-config", cwd=tmp_path)
    assert again.returncode == 2 and not again.stdout
    assert again.stderr.strip() == f"qwen-tui: {written} exists: not overwritten (edit it, or move it away first)"
    assert written.read_text() == (ROOT / "config.toml").read_text()


def test_init_config_refuses_a_directory_and_says_so(tmp_path):
    from backend.errors import ConfigError
    from backend.example_config import write_example

    with pytest.raises(ConfigError, match="is a directory: give a file path"):
        write_example(tmp_path)
    dest = write_example(tmp_path / "new" / "config.toml")
    assert dest.read_text() == (ROOT / "config.toml").read_text()
    assert [p.name for p in dest.parent.iterdir()] == ["config.toml"]  # no temp file left


def test_every_package_of_the_code_is_in_the_wheel():
    """A new folder (backend/settings/ ...) that [tool.setuptools] packages does not name is left out of the
    wheel, and an installed console fails to import it (or, beside an editable clone, imports the clone's)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("backend", "tui") for p in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set()
