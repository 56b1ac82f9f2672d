"""One address per name, checked on the source: no ``import X as X`` re-export, and each test imports a name from
the module that defines it (tests/unit/test_names.py)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def reexport_aliases(source: str, filename: str = "<source>") -> list[str]:
    """Each ``from A import N as N`` / ``import N as N`` in ``source``, as ``file:line: statement``.

    Such an alias only marks N as re-exported (mypy's strict mode reads it so): the name then has two addresses.
    ``import a.b as b`` binds a submodule, not a re-export, and is not one.
    """
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.ImportFrom, ast.Import)):
            continue
        names = [a.name for a in node.names if a.asname == a.name]
        found += [f"{filename}:{node.lineno}: {name} as {name}" for name in names]
    return found


def package_reexports(root: Path) -> list[str]:
    """Every re-export alias in the package under ``root``."""
    return [hit for path in sorted((root / "kernodeck").rglob("*.py"))
            for hit in reexport_aliases(path.read_text(encoding="utf-8"), str(path.relative_to(root)))]


@functools.cache
def _defined(module_file: Path) -> frozenset[str]:
    """The names ``module_file`` defines (not only imports), and, a package's, those it offers (``__all__``)."""
    found = set()
    for node in ast.walk(ast.parse(module_file.read_text(encoding="utf-8"), str(module_file))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        if (module_file.name == "__init__.py" and isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            found.update(ast.literal_eval(node.value))
    return frozenset(found)


def borrowed_imports(root: Path, source: str, filename: str = "<source>") -> list[str]:
    """Each ``from kernodeck.M import N`` in ``source`` where M does not define N (it imported N from elsewhere)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("kernodeck"):
            continue
        base = root / Path(*str(node.module).split("."))
        module_file = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module_file.is_file():
            continue
        for alias in node.names:
            submodule = base / alias.name
            if submodule.with_suffix(".py").is_file() or (submodule / "__init__.py").is_file():
                continue
            if alias.name not in _defined(module_file):
                found.append(f"{filename}:{node.lineno}: {alias.name} is not defined in {node.module}")
    return found


def _module_file(root: Path, dotted: str) -> Path | None:
    base = root / Path(*dotted.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def borrowed_attributes(root: Path, source: str, filename: str = "<source>") -> list[str]:
    """Each ``m.N`` in ``source``, ``m`` a kernodeck module imported by name, where ``m`` does not define ``N``."""
    tree = ast.parse(source, filename)
    modules: dict[str, str] = {}  # local name -> dotted module, for names bound only to a kernodeck module
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernodeck"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                local = alias.asname or alias.name
                if _module_file(root, dotted):
                    modules[local] = dotted
                else:
                    other.add(local)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith("kernodeck") and _module_file(root, alias.name):
                    modules[alias.asname] = alias.name
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            other.add(node.id)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        dotted = modules.get(node.value.id)
        if dotted is None or node.value.id in other or _module_file(root, f"{dotted}.{node.attr}"):
            continue
        module_file = _module_file(root, dotted)
        if module_file is not None and node.attr not in _defined(module_file):
            found.append(f"{filename}:{node.lineno}: {node.value.id}.{node.attr} is not defined in {dotted}")
    return found


def shared_module_names(root: Path) -> dict[str, list[str]]:
    """Each module or package name used more than once in the package under ``root``, with its paths."""
    paths: dict[str, list[str]] = {}
    for path in sorted((root / "kernodeck").rglob("*.py")):
        rel = path.relative_to(root)
        name = rel.parent.name if path.name == "__init__.py" else path.stem
        if rel.parent != Path("kernodeck") or path.name != "__init__.py":
            paths.setdefault(name, []).append(rel.as_posix())
    return {name: found for name, found in paths.items() if len(found) > 1}
