"""The suite's own layout, checked on its source (tests/unit/test_layout.py): every module under tests/ imports its
helpers from tests/helpers/, never from conftest or from a test module; each unit file is named after a module."""

from __future__ import annotations

import ast
from pathlib import Path

# Where a unit file's name may come from: the modules of these folders (the package, the bench, the suite's helpers).
TESTED = ("kernodeck", "bench", "tests/helpers")


def _is_test_module(dotted: str) -> bool:
    """``conftest`` or a ``test_*`` module, by the last part of a dotted name (``tests.e2e.test_x``)."""
    last = dotted.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement may load: ``import a.b``, ``from a import b`` (b may be a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = "." * node.level + (node.module or "")
    return [base] + [f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names]


def borrowed_imports(tests: Path) -> list[str]:
    """Each import, in any module under ``tests``, of conftest or of a test module, as ``path:line: module``.

    Fixtures reach tests through pytest (conftest is never imported) and shared helpers live in tests/helpers/: a test
    module imported by another runs its module-level code twice and ties the two files' refactors together.
    """
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), rel)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found += [f"{rel}:{node.lineno}: {t}" for t in _targets(node) if _is_test_module(t)]
    return found


def module_names(root: Path) -> set[str]:
    """The names a unit file may take: each module (or package) of TESTED, as any tail of its dotted path joined by
    ``_`` (kernodeck/lock/lockfile.py: ``lockfile``, ``lock_lockfile``), a leading underscore dropped."""
    names = set()
    for folder in TESTED:
        for path in (root / folder).rglob("*.py"):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            parts = [*Path(folder).parts[-1:], *parts] if folder != "tests/helpers" else parts
            names |= {"_".join(parts[i:]).lstrip("_") for i in range(len(parts))}
    return names


def unnamed_unit_files(root: Path, allowed: set[str]) -> list[str]:
    """Each tests/unit/test_X.py whose X names no module of TESTED and is not in ``allowed``."""
    known = module_names(root) | allowed
    return [path.relative_to(root).as_posix() for path in sorted((root / "tests" / "unit").glob("test_*.py"))
            if path.stem.removeprefix("test_") not in known]


def shared_basenames(root: Path) -> list[str]:
    """Each test file name that two folders of tests/ share: pytest imports a test file by its name alone (no
    ``__init__.py`` here), so the second fails to collect ("import file mismatch") in a run that collects both."""
    seen: dict[str, list[str]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(path.relative_to(root).as_posix())
    return [" and ".join(paths) for paths in seen.values() if len(paths) > 1]
