"""No import cycle among Kernodeck's modules (issue 20 named one: lock -> rebuild -> wheelhouse -> lock), and every
import, inside a function or not, keeps to the layers of docs/architecture.md ("Layers").

For the layers, every ``import`` counts (tests/wall.py's ``imports_of`` walks them all with ``ast``: inside functions,
under ``if TYPE_CHECKING:``, ``importlib.import_module("...")``). For the cycles:
module-level imports only: what runs when a module is imported (its top level, top-level ``if``/``try``/``with``
blocks and class bodies). An import inside a function runs when it is called, and one under ``if TYPE_CHECKING:``
never runs: neither counts here. An import needs the module it takes names or a submodule from; importing ``a.b.c``
also runs ``a.b``'s ``__init__`` first (which may re-export from its submodules). The whole package has no cycle
between the modules imports need; the lock package has none even counting the ``__init__`` each import runs.
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import wall

ROOT = Path(__file__).resolve().parents[2]


def _module(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runs_at_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module body that run when the module is imported."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            test = node.test
            checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
            yield from _runs_at_import(node.orelse if checking else [*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            yield from _runs_at_import([*node.body, *node.orelse, *node.finalbody,
                                        *(s for h in node.handlers for s in h.body)])
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _runs_at_import(node.body)


def _names(module: str, path: Path) -> tuple[tuple[str, str | None], ...]:
    """(module name, name taken from it or None) for each import that runs when ``module`` is imported."""
    return _names_in(module, path.name == "__init__.py", path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=4096)
def _names_in(module: str, is_init: bool, text: str) -> tuple[tuple[str, str | None], ...]:
    """:func:`_names` of a file's text: each test's copy of the package parses only the file it planted in."""
    found: list[tuple[str, str | None]] = []
    for node in _runs_at_import(ast.parse(text, module).body):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
            continue
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_init else module.split(".")[:-1]
            here = here[: len(here) - node.level + 1]
            base = ".".join([*here, base] if base else here)
        found += [(base, alias.name) for alias in node.names]
    return tuple(found)


def import_graph(root: Path, package: str = "kernodeck", *, inits: bool = True) -> dict[str, set[str]]:
    """Each module of ``package`` under ``root`` -> the modules of the package its import runs.

    An import needs the module it names; ``from m import f`` needs ``m`` finished (``f`` defined), while
    ``from pkg import sub`` of a submodule needs ``pkg.sub``. ``inits``: also the ``__init__`` of each package above
    a needed module, which runs first when that package is not being imported already (the importer's own are).
    """
    paths = {_module(root, p): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        needed: set[str] = set()
        for base, taken in _names(module, path):
            name = f"{base}.{taken}" if taken and f"{base}.{taken}" in paths else base
            while name and name not in paths:
                name = name.rpartition(".")[0]  # `import a.b` where b is not a module: a
            if not name:
                continue
            if name != module:
                needed.add(name)
            parent = name.rpartition(".")[0]
            while inits and parent and parent != package:
                if parent in paths and parent != module and not module.startswith(parent + "."):
                    needed.add(parent)
                parent = parent.rpartition(".")[0]
        graph[module] = needed
    return graph


def groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module: each module of a group imports, through the others,
    itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle of each group, as the shortest path from its first module back to itself."""
    return [_path(graph, min(group), group) for group in groups(graph)]


def _path(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest way from ``start`` back to itself inside ``group``."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & group):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no way back to {start} in {sorted(group)}")


def test_kernodeck_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, inits=False)
    assert "kernodeck.lock.check" in graph["kernodeck.env.wheelhouse"]  # the graph sees the imports it must see
    assert "kernodeck.lock" not in graph["kernodeck.env.wheelhouse"]  # `from kernodeck.lock import lockfile`
    assert cycles(graph) == []


def test_no_cycle_through_locking_even_by_a_package_init() -> None:
    """Counting the ``__init__`` that an import runs first: the lock package and the env modules that use it (the
    cycle issue 20 named) are in no cycle. Other packages' cycles of this kind are their owners' to break."""
    graph = import_graph(ROOT)
    assert "kernodeck.lock" in graph["kernodeck.env.wheelhouse"]  # the graph sees the __init__ an import runs
    touching = [cycle for group, cycle in zip(groups(graph), cycles(graph), strict=True)
                if any(m.startswith(("kernodeck.lock", "kernodeck.env.wheelhouse", "kernodeck.env.pythons"))
                       for m in group)]
    assert touching == []


def test_the_lock_is_made_below_the_env() -> None:
    """The edge that closed issue 20's cycle is gone, even as a lazy import: compiling a lock takes its file lock
    from kernodeck.platform_lock, and reaches no module of kernodeck.env through any import (tests/helpers/wall.py
    follows them all)."""
    reached = wall.Graph(ROOT).reach("kernodeck.lock.compile")
    assert "kernodeck.platform_lock" in reached
    assert not [name for name in reached if name.startswith("kernodeck.env")], reached


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package to plant imports in."""
    shutil.copytree(ROOT / "kernodeck", tmp_path / "kernodeck", ignore=shutil.ignore_patterns("__pycache__", "*.json",
                                                                                          "templates"))
    assert _new_groups(tmp_path, inits=True) == []
    return tmp_path


def _plant(tree: Path, rel: str, line: str) -> None:
    path = tree / "kernodeck" / rel
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition("from __future__ import annotations\n")
    assert sep, rel
    path.write_text(head + sep + line + "\n" + rest, encoding="utf-8")


@functools.cache
def _groups_here(*, inits: bool) -> list[set[str]]:
    return groups(import_graph(ROOT, inits=inits))


def _new_groups(tree: Path, *, inits: bool) -> list[set[str]]:
    before = _groups_here(inits=inits)
    return [group for group in groups(import_graph(tree, inits=inits)) if group not in before]


@pytest.mark.parametrize(("rel", "line", "members"), [
    # issue 20's cycle, planted back at module level: rebuild -> wheelhouse -> lock.check -> lock.inputs -> rebuild
    ("lock/inputs.py", "from kernodeck.env.rebuild import acquire", {"kernodeck.env.rebuild", "kernodeck.lock.inputs"}),
    ("lock/lockfile.py", "from kernodeck.lock import pylock", {"kernodeck.lock.lockfile", "kernodeck.lock.pylock"}),
    # a module taking a name from a module that imports it
    ("lock/inputs.py", "from kernodeck.lock.compile import compile_lock",
     {"kernodeck.lock.compile", "kernodeck.lock.inputs"}),
    ("lock/lockfile.py", "try:\n    from kernodeck.lock import check\nexcept ImportError:\n    pass",
     {"kernodeck.lock.lockfile", "kernodeck.lock.check"}),
])
def test_a_planted_cycle_is_found(tree: Path, rel: str, line: str, members: set[str]) -> None:
    _plant(tree, rel, line)
    found = _new_groups(tree, inits=False)
    assert len(found) == 1 and members <= found[0], found
    cycle = cycles(import_graph(tree, inits=False))[0]
    assert cycle[0] == cycle[-1] and set(cycle) <= found[0], cycle


def test_a_planted_cycle_through_a_package_init_is_found(tree: Path) -> None:
    """wheelhouse imports lock.check, which runs lock/__init__ first: an __init__ that imported compile (as it did
    when it re-exported names), with a compile that needs wheelhouse at import time, closes a cycle that only the
    __init__ edges show."""
    init = tree / "kernodeck" / "lock" / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + "from kernodeck.lock.compile import compile_lock\n",
                    encoding="utf-8")
    _plant(tree, "lock/compile.py", "from kernodeck.env.wheelhouse import download")
    assert _new_groups(tree, inits=False) == []
    found = _new_groups(tree, inits=True)
    assert len(found) == 1 and {"kernodeck.lock", "kernodeck.lock.compile", "kernodeck.env.wheelhouse"} <= found[0]


@pytest.mark.parametrize("line", [
    "def later() -> None:\n    from kernodeck.env.rebuild import acquire",  # runs when called, not when imported
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kernodeck.env.rebuild import acquire",
])
def test_a_lazy_import_is_no_cycle(tree: Path, line: str) -> None:
    _plant(tree, "lock/inputs.py", line)
    assert _new_groups(tree, inits=True) == []


# --- the layers ------------------------------------------------------------------------------------------------------

# Lowest first (docs/architecture.md, "Layers"): a module imports from its own layer and the ones below it. The names
# are the package's top-level modules and subpackages ("kernodeck": its __init__).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kernodeck", "errors", "tips", "exitcodes", "_fs", "noxsessions", "inenv"),
    ("project", "sources", "_proc", "outdir", "platform_lock", "supervise", "early", "stackdump"),
    ("lock",),
    ("env",),
    ("runformat",),
    ("verify",),
    ("dossier",),
    ("measure", "upgrade", "ci"),
    ("cli", "__main__", "docpage"),
)


def _part(module: str) -> str:
    """The top-level module or subpackage a module belongs to (``kernodeck.lock.check`` -> ``lock``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_breaches(root: Path) -> tuple[set[tuple[str, str]], set[str]]:
    """Every import of a module above the importer's layer (importer, imported), and the parts no layer places."""
    rank = {part: number for number, layer in enumerate(LAYERS) for part in layer}
    graph = wall.Graph(root)
    upward: set[tuple[str, str]] = set()
    unplaced = {_part(module) for module in graph.edges} - rank.keys()
    for module, names in graph.edges.items():
        for name in names:
            target = graph.local(name)
            if target is None or _part(module) in unplaced or _part(target) in unplaced:
                continue
            if rank[_part(target)] > rank[_part(module)]:
                upward.add((module, target))
    return upward, unplaced


def test_every_import_keeps_to_the_layers() -> None:
    upward, unplaced = layer_breaches(ROOT)
    assert unplaced == set()
    assert upward == set()
    # the graph sees what it must: a lazy import inside a function (upgrade runs verify), and upgrade is above verify
    graph = wall.Graph(ROOT)
    assert "kernodeck.verify" in graph.edges["kernodeck.upgrade.relock"]
    assert "kernodeck.env.rebuild" in graph.edges["kernodeck.upgrade.bisect"]


@pytest.mark.parametrize(("rel", "line", "breach"), [
    # inside a function: runs only when called, an upward import all the same
    ("lock/inputs.py", "def later() -> None:\n    from kernodeck.verify import runbuild",
     ("kernodeck.lock.inputs", "kernodeck.verify.runbuild")),
    ("env/envdirs.py", "import typing\nif typing.TYPE_CHECKING:\n    from kernodeck.runformat import manifest",
     ("kernodeck.env.envdirs", "kernodeck.runformat.manifest")),
    ("runformat/lineage.py", "def later() -> None:\n    import kernodeck.upgrade.relock",
     ("kernodeck.runformat.lineage", "kernodeck.upgrade.relock")),
    ("project/config.py", "def later() -> None:\n    import importlib\n    importlib.import_module('kernodeck.cli.x')",
     ("kernodeck.project.config", "kernodeck.cli")),
    # the breaches issue 30 removed, planted back: verify reading a run folder through dossier/, and the run folder's
    # format taking verify's step record
    ("verify/writer.py", "from kernodeck.dossier import replay",
     ("kernodeck.verify.writer", "kernodeck.dossier.replay")),
    ("runformat/recording.py", "from kernodeck.verify.record import Step",
     ("kernodeck.runformat.recording", "kernodeck.verify.record")),
])
def test_a_planted_upward_import_fails_the_layers(tree: Path, rel: str, line: str, breach: tuple[str, str]) -> None:
    _plant(tree, rel, line)
    upward, unplaced = layer_breaches(tree)
    # ``from a import b`` names the package a and its module a.b: both upward
    assert breach in upward and {importer for importer, _ in upward} == {breach[0]} and unplaced == set()


def test_a_package_without_a_layer_fails(tree: Path) -> None:
    (tree / "kernodeck" / "newpart").mkdir()
    (tree / "kernodeck" / "newpart" / "__init__.py").write_text("from kernodeck import errors\n", encoding="utf-8")
    assert layer_breaches(tree)[1] == {"newpart"}


def test_a_downward_import_is_no_breach(tree: Path) -> None:
    _plant(tree, "upgrade/relock.py", "def later() -> None:\n    from kernodeck.project import config")
    assert layer_breaches(tree)[0] == set()
