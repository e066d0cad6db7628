"""The packages import one way (docs/architecture.md, "Layers"): a module
may import its own package and the packages below it, never one above, and
every import of a colosim module sits at the top of its module, where a
reader sees the real graph (the command line alone defers its commands'
modules, so `colosim --help` answers without loading them)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# lowest first; a package may import the ones before it
LAYERS = ("results", "sim", "policies", "backends", "scenarios", "calibration", "cli")
# the one package allowed to import colosim modules inside functions
DEFERRED = ("cli",)


def module_level(body: list[ast.stmt]):
    """The statements run when the module is imported: its body and the
    blocks of its top-level ``if`` (``if cython.compiled:``) and ``try``,
    not the bodies of the functions and classes defined there."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *(h.body for h in getattr(node, "handlers", []))):
                yield from module_level(block)


def imported_by_name(node: ast.AST) -> str | None:
    """The module an ``importlib.import_module("...")`` call names (the
    constant head of an f-string: ``f"calibration.bench.{n}"``), or None."""
    if not (isinstance(node, ast.Call) and node.args
            and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.JoinedStr) and arg.values:
        arg = arg.values[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, at module top) of every import of ``path``; a module
    imported by name at run time (a plug-in, a lazy registry) counts as at
    the top: only its layer is checked."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(node) for node in module_level(tree.body)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif imported_by_name(node):
            found.append((imported_by_name(node), node.lineno, True))
            continue
        else:
            continue
        found += [(name, node.lineno, id(node) in top) for name in names]
    return found


def sources() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")
                  if "build" not in p.relative_to(ROOT).parts)


def violations(paths) -> list[str]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    out = []
    for path in paths:
        rel = path.relative_to(ROOT)
        own = rel.parts[0]
        for module, line, at_top in imports(path):
            target = module.split(".")[0]
            if target not in rank:
                continue
            if rank[target] > rank[own]:
                out.append(f"{rel}:{line} imports {module}: {target} is above {own}")
            if not at_top and own not in DEFERRED:
                out.append(f"{rel}:{line} imports {module} inside a function")
    return out


def test_every_package_is_a_layer():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert packages == set(LAYERS)


def test_imports_run_down_the_layers():
    assert violations(sources()) == []


@pytest.mark.parametrize("source, problem", [
    ("from scenarios.config import compose\n", "is above sim"),
    ("def f():\n    from sim.engine import Engine\n", "inside a function"),
    ("if True:\n    def f():\n        import sim.engine\n", "inside a function"),
    ("class C:\n    def f(self):\n        from policies import kernel\n", "is above sim"),
    ("import importlib\nk = importlib.import_module('policies.kernel')\n", "is above sim"),
    ("import importlib\ndef f(n):\n    return importlib.import_module(f'backends.{n}')\n",
     "is above sim"),
])
def test_the_check_catches(tmp_path, source, problem, monkeypatch):
    module = tmp_path / "sim" / "bad.py"
    module.parent.mkdir()
    module.write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert [v for v in violations([module]) if problem in v]
