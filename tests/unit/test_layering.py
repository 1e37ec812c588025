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
    assert "backend.server.supervisor" in MODULES and "backend.settings" in MODULES


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


def _function_level_imports_without_a_why() -> list[str]:
    """Imports inside a function (not under TYPE_CHECKING) with no comment on their line, the line
    above, or the first import of their block."""
    import ast

    missing = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        src = path.read_text().splitlines()
        found: list[ast.stmt] = []

        def visit(node: ast.AST, in_func: bool, in_tc: bool, found: list[ast.stmt]) -> None:
            for child in ast.iter_child_nodes(node):
                func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                tc = in_tc or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                if isinstance(child, (ast.Import, ast.ImportFrom)) and in_func and not in_tc:
                    found.append(child)
                visit(child, func, tc, found)

        visit(ast.parse("\n".join(src)), False, False, found)
        block_ok, last_end = False, -1
        for node in sorted(found, key=lambda n: n.lineno):
            lines = src[node.lineno - 1:node.end_lineno]
            above = src[node.lineno - 2].strip() if node.lineno >= 2 else ""
            ok = any("#" in ln for ln in lines) or above.startswith("#") or (node.lineno == last_end + 1 and block_ok)
            block_ok, last_end = ok, node.end_lineno
            if not ok:
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[0].strip()}")
    return missing


def test_every_function_level_import_says_why() -> None:
    """A function-level import hides a cycle or saves start-up time; the second is a reason, and
    the comment beside it says so (start-up, an optional dependency, one subcommand's needs)."""
    assert _function_level_imports_without_a_why() == []
