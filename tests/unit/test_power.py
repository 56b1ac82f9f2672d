"""The criterion's power (kernodeck/inenv/power.py): the rows it must fail changed are real rows, and the walk finds
the rows a spot check leaves unjudged wherever they are (red-team pass 19, FP1 and FP2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernodeck.inenv import power


def _unit_rows(rows: int, dim: int = 8, seed: int = 1) -> Any:
    arr = np.random.default_rng(seed).standard_normal((rows, dim))
    return (arr / np.linalg.norm(arr, axis=1, keepdims=True)).astype(np.float32)


def _spot(truth: Any, checked: list[int], form: bool = False) -> power.Judge:
    """A spot check of ``checked`` rows, behind a validity check of every row when ``form``."""
    def judge(outputs: dict[str, Any]) -> tuple[bool, str]:
        x = outputs["x"]
        if form and not np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-3):
            return False, "rows are not unit vectors"
        return bool(np.allclose(x[checked], truth[checked], atol=1e-5)), f"{len(checked)} rows right"
    return judge


def test_changed_rows_take_other_rows_values_in_every_output_and_stay_distinct() -> None:
    x = _unit_rows(10)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0], dtype=np.int64)
    rows = np.array([1, 3, 4, 8])
    out = power.replaced({"x": x, "labels": labels}, {"x": rows, "labels": rows}, np.random.default_rng(0))
    for r in range(10):
        if r not in rows:
            assert out["x"][r].tobytes() == x[r].tobytes() and out["labels"][r] == labels[r]
            continue
        donor = [d for d in range(10) if x[d].tobytes() == out["x"][r].tobytes()]
        assert donor and donor[0] != r and labels[donor[0]] == out["labels"][r] != labels[r], (r, donor)
    assert len({out["x"][r].tobytes() for r in rows}) == len(rows)  # no row twice among the changed


def test_a_sample_of_alike_rows_gets_other_values() -> None:
    """Where no row can lend (every row alike), a row is still made wrong: noise, another label, a flipped bool."""
    same = {"x": np.ones((4, 3), dtype=np.float32), "y": np.zeros(4, dtype=np.int64), "b": np.zeros(4, dtype=bool)}
    out = power.replaced(same, {name: np.array([0, 2]) for name in same}, np.random.default_rng(0))
    for name, arr in same.items():
        assert (out[name][[0, 2]] != arr[[0, 2]]).reshape(2, -1).any(axis=1).all(), name
        assert (out[name][[1, 3]] == arr[[1, 3]]).all(), name


@pytest.mark.parametrize(("rows", "checked"), [(8, [0, 1, 2, 3]), (8, [5]), (40, list(range(10))),
                                               (100, [3, 17, 44, 61, 90]), (101, list(range(0, 101, 3)))])
@pytest.mark.parametrize("form", [False, True])
def test_the_walk_finds_the_rows_a_spot_check_leaves_unjudged(rows: int, checked: list[int], form: bool) -> None:
    truth = _unit_rows(rows)
    walked = power.walk(_spot(truth, checked, form), {"x": truth})
    assert walked["passed"] is True and walked["changed"] >= (rows + 1) // 2, walked
    assert not set(walked["changed_rows"]) & set(checked), walked
    found = power.criterion_controls(_spot(truth, checked, form), {"x": truth})
    assert found["able_to_fail"] is False and found["walk"]["passed"] is True


@pytest.mark.parametrize("rows", [8, 40, 400])
def test_a_criterion_judging_every_row_is_walked_briefly_and_accepted(rows: int) -> None:
    truth = _unit_rows(rows)
    walked = power.walk(_spot(truth, list(range(rows)), True), {"x": truth})
    assert walked["passed"] is False and walked["changed"] == 0 and walked["calls"] <= power.MISSES, walked


def test_an_aggregate_with_a_threshold_is_walked_and_accepted() -> None:
    """Accuracy >= 0.9 over 100 labels: the walk gathers ten rows, then fails each row added alone, and stops."""
    labels = np.arange(100, dtype=np.int64) % 7
    found = power.criterion_controls(lambda o: (float((o["y"] == labels).mean()) >= 0.9, "accuracy"), {"y": labels})
    assert found["able_to_fail"] is True and found["walk"]["changed"] == 10, found["walk"]
    assert found["walk"]["calls"] <= 2 * power.MISSES + 8, found["walk"]
    # a majority tolerates half its rows wrong: the walk gathers half of them and it is refused
    lax = power.criterion_controls(lambda o: (float((o["y"] == labels).mean()) >= 0.5, "accuracy"), {"y": labels})
    assert lax["able_to_fail"] is False and lax["walk"]["passed"] is True and lax["walk"]["changed"] == 50


def test_outputs_of_different_row_counts_are_not_walked() -> None:
    walked = power.walk(lambda o: (True, "any"), {"a": np.zeros((3, 2)), "b": np.zeros((4, 2))})
    assert walked["applies"] is False and walked["calls"] == 0


def test_the_refusal_names_the_rows_gathered_and_the_rows_judged() -> None:
    from kernodeck.inenv import judge

    truth = _unit_rows(8)
    found = power.criterion_controls(_spot(truth, [0, 1, 2, 3]), {"x": truth})
    said = judge._unable(found)
    assert ("it cannot see 4 of its 8 rows wrong, each given another row's values (rows 4, 5, 6, 7: 4 rows right): "
            "it judges only some rows (the rows it failed on, added to those: 0, 2)") in said, said
