"""world.py: the window's new modules, as the closed world judges them."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path

import pytest

from kernodeck.inenv import declared_files, seen, verified, world
from kernodeck.inenv._common import Context


@pytest.fixture()
def judged(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    calls: list[set[str]] = []
    monkeypatch.setattr(world, "judge", lambda ctx, who, new: calls.append(set(new)))
    return calls


def test_a_window_that_imports_nothing_judges_no_module(judged: list[set[str]]) -> None:
    world._judge_window(None, "the criterion", dict(sys.modules))  # type: ignore[arg-type]
    assert judged == [set()]


def test_a_new_module_is_judged_and_an_alias_of_a_loaded_one_is_not(
        judged: list[set[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    before = dict(sys.modules)
    fresh = types.ModuleType("kernodeck_test_fresh")
    monkeypatch.setitem(sys.modules, "kernodeck_test_fresh", fresh)
    # multiprocessing's __mp_main__ is __main__ under another name: no new code was loaded
    monkeypatch.setitem(sys.modules, "kernodeck_test_alias", sys.modules["sys"])
    world._judge_window(None, "the entry", before)  # type: ignore[arg-type]
    assert judged == [{"kernodeck_test_fresh"}]


def test_a_module_swapped_for_another_name_is_judged(judged: list[set[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """As many names as at the window's start, one of them new (another removed): the names are compared, not only
    counted, so the new one is judged."""
    monkeypatch.setitem(sys.modules, "kernodeck_test_gone", types.ModuleType("kernodeck_test_gone"))
    before = dict(sys.modules)
    monkeypatch.delitem(sys.modules, "kernodeck_test_gone")
    monkeypatch.setitem(sys.modules, "kernodeck_test_swapped", types.ModuleType("kernodeck_test_swapped"))
    assert len(sys.modules) == len(before)
    world._judge_window(None, "the criterion", before)  # type: ignore[arg-type]
    assert judged == [{"kernodeck_test_swapped"}]


def _ctx(tmp_path: Path) -> Context:
    (tmp_path / "app.py").write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "undeclared.csv").write_text("1\n", encoding="utf-8")
    return Context({"project_root": str(tmp_path), "application": {"sources": {"app.py": "ab" * 32},
                                                                     "sample": "sample.jsonl"}}, tmp_path / "out")


def test_each_window_gets_its_own_project_finder_put_back_in_its_place(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    first = declared_files.finder(ctx, lambda: True)
    assert first.expected == {str(tmp_path / "app.py"): "ab" * 32}
    first.expected.clear()  # what the application does to one window's finder stays there
    # and what names a file in its messages (red-team pass 87, SHOWN1: the one namer every window's finder shared)
    first.shown.__closure__[0].cell_contents = ("/",)  # type: ignore[attr-defined]
    second = declared_files.finder(ctx, lambda: True)
    assert second is not first and second.expected == {str(tmp_path / "app.py"): "ab" * 32}
    assert first.shown(str(tmp_path / "app.py")) != "app.py" == second.shown(str(tmp_path / "app.py"))
    saved = list(sys.meta_path)
    try:
        verified.install(first)
        sys.meta_path.remove(first)  # the application took it off: the next window puts one back before PathFinder
        verified.install(second)
        assert first not in sys.meta_path
        assert sys.meta_path[sys.meta_path.index(second) + 1:].count(importlib.machinery.PathFinder) == 1
    finally:
        sys.meta_path[:] = saved


def test_a_window_that_read_and_listed_nothing_is_judged_without_looking_further(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seen, "READ", {})
    monkeypatch.setattr(seen, "LISTED", {})
    assert world.strangers(Context({}, tmp_path), set()) == []  # no declaration, no folder asked for
    assert world.moved(Context({}, tmp_path), set()) == []
    # the control: a listing of a project folder holding an undeclared name is still judged, and named
    ctx = _ctx(tmp_path)
    monkeypatch.setattr(seen, "LISTED", {str(tmp_path / "listed"): "the criterion"})
    found = world.strangers(ctx, set())
    assert [(f["file"], f["how"]) for f in found] == [("listed/", "listed: undeclared.csv")]
