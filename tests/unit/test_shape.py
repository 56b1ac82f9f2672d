"""A house a newcomer can read: no module of Kernodeck or of its bench over 400 lines, no function over 80 (issue 20's
rule; bench/ since issue 30)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.project import ROOT

MAX_MODULE, MAX_FUNCTION = 400, 80
CHECKED = ("kernodeck", "bench")  # the package and the bench beside it
# fastjsonschema's code (tests/helpers/schema_code.py), not read by people
GENERATED = {"kernodeck/project/_tool_schema.py"}


def oversized(root: Path) -> list[str]:
    """Each module over MAX_MODULE lines and each function over MAX_FUNCTION, as ``path[:line]: what``."""
    found: list[str] = []
    for path in sorted(p for folder in CHECKED for p in (root / folder).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in GENERATED:
            continue
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION:
                    found.append(f"{rel}:{node.lineno}: {node.name}() {length} lines")
    return found


def test_no_module_or_function_is_over_the_limits() -> None:
    assert oversized(ROOT) == []


def test_a_long_module_and_a_long_function_are_named(tmp_path: Path) -> None:
    package = tmp_path / "kernodeck"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION))
    (package / "long.py").write_text("def f():\n" + body + "\n" * (MAX_MODULE - MAX_FUNCTION), encoding="utf-8")
    (package / "short.py").write_text("def g():\n    return 1\n", encoding="utf-8")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text("def h():\n" + body, encoding="utf-8")
    assert oversized(tmp_path) == [
        "bench/run.py:1: h() 81 lines",
        f"kernodeck/long.py: {MAX_MODULE + 1} lines",
        "kernodeck/long.py:1: f() 81 lines",
    ]
