"""The wall on the import graph: what each side of it may import, read from the source with ``ast``, transitively.

Three contracts (ARCHITECTURE.md, "Two sides of one wall"):
- the orchestrator (``kernodeck/`` outside ``inenv/`` and ``templates/``) never imports torch, numpy or another
  package that only the rebuilt env has, directly or through any module of its own;
- ``kernodeck/inenv/`` (run by path with ``python -I`` inside the env) imports nothing of the orchestrator;
- the application (``checks/``, each example's ``checks/``, ``init``'s templates) imports nothing of Kernodeck.

Every import counts: module level or inside a function, ``import a.b``, ``from . import x``, ``from .x import y``,
and ``importlib.import_module("…")`` / ``__import__("…")`` with a literal name.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

# Packages that only the rebuilt env has: the orchestrator runs in nox's venv, which holds none of them.
IN_ENV_ONLY = frozenset({"torch", "numpy", "scipy", "sklearn", "sentence_transformers", "transformers",
                         "huggingface_hub", "safetensors", "tokenizers", "triton"})


@dataclass(frozen=True)
class Breach:
    """One forbidden import, with the chain of modules that leads to it."""

    rule: str
    chain: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.rule}: {' -> '.join(self.chain)}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).parts)
    parts[-1] = parts[-1].split(".")[0]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(name: str, module: str, is_package: bool, level: int) -> str:
    if level == 0:
        return name
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, name] if name else base)


def imports_of(root: Path, path: Path) -> set[str]:
    """Every module name ``path`` imports, made absolute (``from . import x`` gives both the package and ``pkg.x``)."""
    return set(_imports_in(module_name(root, path), path.name == "__init__.py", path.read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=4096)
def _imports_in(module: str, is_package: bool, text: str) -> frozenset[str]:
    """:func:`imports_of` a file's text (a test's copy of the tree parses only the files it changed)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text, module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", module, is_package, node.level)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            found.add(node.args[0].value)
    return frozenset(name for name in found if name)


class Graph:
    """The modules under ``root`` that belong to ``package`` and what each imports."""

    def __init__(self, root: Path, package: str = "kernodeck") -> None:
        self.root = root
        self.edges: dict[str, set[str]] = {}
        for path in sorted((root / package).rglob("*.py")):
            self.edges[module_name(root, path)] = imports_of(root, path)

    def local(self, name: str) -> str | None:
        """The module of this package that ``name`` designates (``a.b.c`` may be a function ``c`` of ``a.b``)."""
        while name:
            if name in self.edges:
                return name
            name = name.rpartition(".")[0]
        return None

    def reach(self, start: str) -> dict[str, tuple[str, ...]]:
        """Every name reachable from ``start``, each with the shortest chain of local modules leading to it."""
        chains: dict[str, tuple[str, ...]] = {start: (start,)}
        queue = [start]
        while queue:
            current = queue.pop(0)
            for name in sorted(self.edges.get(current, ())):
                target = self.local(name) or name
                if target in chains:
                    continue
                chains[target] = (*chains[current], target)
                if target in self.edges:
                    queue.append(target)
        return chains


def orchestrator_breaches(graph: Graph) -> list[Breach]:
    breaches = []
    for module in graph.edges:
        if ".inenv" in module or ".templates" in module:
            continue
        for name, chain in graph.reach(module).items():
            if name.split(".")[0] in IN_ENV_ONLY and len(chain) == 2:  # reported once, at the module that imports it
                breaches.append(Breach("the orchestrator imports an in-env package", chain))
            elif graph.local(name) and ".inenv" in name and len(chain) == 2:
                inner = [n for n, c in graph.reach(name).items() if n.split(".")[0] in IN_ENV_ONLY]
                if inner:
                    breaches.append(Breach("the orchestrator imports an in-env module that needs " + inner[0],
                                           chain))
    return breaches


def inenv_breaches(graph: Graph) -> list[Breach]:
    breaches = []
    for module, names in graph.edges.items():
        if ".inenv" not in module:
            continue
        for name in sorted(names):
            if name.split(".")[0] == "kernodeck" and not name.startswith("kernodeck.inenv"):
                breaches.append(Breach("kernodeck/inenv imports the orchestrator", (module, name)))
    return breaches


def application_breaches(root: Path, files: list[Path]) -> list[Breach]:
    breaches = []
    for path in files:
        for name in sorted(imports_of(root, path)):
            if name.split(".")[0] == "kernodeck":
                breaches.append(Breach("the application imports Kernodeck", (str(path.relative_to(root)), name)))
    return breaches


def application_files(root: Path) -> list[Path]:
    return sorted([*root.glob("checks/*.py"), *root.glob("examples/*/checks/*.py"),
                   *(root / "kernodeck" / "project" / "templates" / "checks").rglob("*.py.tmpl")])


def breaches(root: Path) -> list[Breach]:
    """Every breach under ``root``, one per module, rule and imported top-level package (the shortest name first)."""
    graph = Graph(root)
    found = [*orchestrator_breaches(graph), *inenv_breaches(graph),
             *application_breaches(root, application_files(root))]
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for breach in sorted(found, key=lambda b: (b.chain[0], b.rule, len(b.chain[-1]), b.chain)):
        key = (breach.chain[0], breach.rule.split(" that needs ")[0], breach.chain[-1].split(".")[0])
        if key not in seen:
            seen.add(key)
            kept.append(breach)
    return kept
