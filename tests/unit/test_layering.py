"""backend/ never imports Textual: every module, imported alone in a fresh interpreter."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT

MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (ROOT / "backend").rglob("*.py") if p.name != "__main__.py"
)


def test_there_are_backend_modules():
    assert "backend.supervisor" in MODULES and "backend.settings" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_backend_module_does_not_import_textual(module):
    code = (f"import sys, {module}; bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"{module} imports textual: {r.stdout} {r.stderr[-500:]}"
