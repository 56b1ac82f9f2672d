"""One address per name (tests/helpers/names.py): no re-export alias in the package, each name imported from the module
that defines it; each check shown failing on a planted breach."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import names

ROOT = Path(__file__).resolve().parents[2]
IMPORTERS = ("kernodeck", "tests", "bench", "checks")


def test_the_package_has_no_reexport_alias() -> None:
    assert names.package_reexports(ROOT) == []


def test_a_planted_reexport_alias_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "kernodeck" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from kernodeck.errors import KernodeckError as KernodeckError\n"
        "from kernodeck.lock.check import (\n    check_lock as check_lock,\n    read_lock,\n)\n"
        "import json as json\n"
        # not re-exports: a submodule bound by its own name, a renaming alias
        "import importlib.metadata as metadata\nfrom kernodeck.lock import compile as lock_compile\n",
        encoding="utf-8",
    )
    assert names.package_reexports(tmp_path) == [
        "kernodeck/planted.py:1: KernodeckError as KernodeckError",
        "kernodeck/planted.py:2: check_lock as check_lock",
        "kernodeck/planted.py:6: json as json",
    ]


def _sources() -> list[tuple[str, str]]:
    return [(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
            for top in IMPORTERS for path in sorted((ROOT / top).rglob("*.py"))]


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    sources = _sources()
    assert [hit for text, name in sources for hit in names.borrowed_imports(ROOT, text, name)] == []
    assert [hit for text, name in sources for hit in names.borrowed_attributes(ROOT, text, name)] == []


def test_a_name_imported_from_a_module_that_only_imports_it_is_caught() -> None:
    source = (
        "from kernodeck.runformat.sbom import sha256_file\n"  # sbom imports it from kernodeck._fs
        "from kernodeck._fs import sha256_file as digest\n"  # where it is defined
        "from kernodeck.sources import redact_text\n"  # a package's API, declared in its __all__
        "from kernodeck.lock import lockfile\n"  # a submodule
        "from kernodeck.measure.tolerance_search import render\n"  # a module's import, not its API
    )
    assert names.borrowed_imports(ROOT, source, "planted.py") == [
        "planted.py:1: sha256_file is not defined in kernodeck.runformat.sbom",
        "planted.py:5: render is not defined in kernodeck.measure.tolerance_search",
    ]


def test_a_name_reached_through_a_module_that_only_imports_it_is_caught() -> None:
    source = (
        "from kernodeck.upgrade import bisect\nfrom kernodeck import outdir as out\n"
        "bisect.KernodeckError\n"  # bisect imports it from kernodeck.errors
        "bisect.bisect_locks\n"  # defined there
        "out.UnsafeOut\n"  # through an alias
    )
    assert names.borrowed_attributes(ROOT, source, "planted.py") == [
        "planted.py:3: bisect.KernodeckError is not defined in kernodeck.upgrade.bisect",
        "planted.py:5: out.UnsafeOut is not defined in kernodeck.outdir",
    ]


def test_no_two_modules_share_a_name() -> None:
    """The outside twin of each in-env module name was renamed (app_contract, tolerance_search, drift_map, compare):
    kernodeck/inenv/ files keep theirs, being fingerprinted (the reference records their sha256) and run by path."""
    assert names.shared_module_names(ROOT) == {}


def test_a_module_name_used_twice_is_caught(tmp_path: Path) -> None:
    for rel in ("kernodeck/__init__.py", "kernodeck/a/__init__.py", "kernodeck/a/config.py",
                "kernodeck/b/__init__.py", "kernodeck/b/config.py", "kernodeck/b/a.py", "kernodeck/c.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    assert names.shared_module_names(tmp_path) == {
        "a": ["kernodeck/a/__init__.py", "kernodeck/b/a.py"],  # a package and a module
        "config": ["kernodeck/a/config.py", "kernodeck/b/config.py"],
    }
