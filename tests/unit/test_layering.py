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


def test_no_import_cycles() -> None:
    """No module of backend/ or tui/ imports, at run time and at any depth, a module that imports it
    back (a function-level import counts: it only hides the cycle). Type-checking-only imports do not
    run and do not count."""
    grimp = pytest.importorskip("grimp")  # comes with import-linter (the dev extra)
    graph = grimp.build_graph("backend", "tui", cache_dir=None, exclude_type_checking_imports=True)
    cycles = sorted({tuple(sorted((a, b))) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
                     if b in graph.modules and graph.find_shortest_chain(importer=b, imported=a)})
    assert cycles == []
