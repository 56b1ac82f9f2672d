"""world.py: the window's new modules, as the closed world judges them."""

from __future__ import annotations

import sys
import types

import pytest

from kernodeck.inenv import world


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
