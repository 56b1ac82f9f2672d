"""The criterion's power (kernodeck/inenv/power.py): the rows it must fail changed are real rows of another kind, and
the search by blocks finds the rows a spot check leaves unjudged wherever they are (red-team pass 19, FP1 and FP2),
without picking rows for passing (pass 20, FF4 and FF9)."""

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


def _replaced(outputs: dict[str, Any], rows: Any) -> dict[str, Any]:
    grouped = power.groups(outputs)
    return power.replaced(outputs, {group.n: rows for group in grouped}, grouped, np.random.default_rng(0))


def test_changed_rows_take_other_rows_values_in_every_output() -> None:
    x = _unit_rows(10)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0], dtype=np.int64)
    rows = np.array([1, 3, 4, 8])
    out = _replaced({"x": x, "labels": labels}, rows)
    for r in range(10):
        if r not in rows:
            assert out["x"][r].tobytes() == x[r].tobytes() and out["labels"][r] == labels[r]
            continue
        donor = [d for d in range(10) if x[d].tobytes() == out["x"][r].tobytes()]
        assert donor and donor[0] != r and labels[donor[0]] == out["labels"][r], (r, donor)  # one row, both outputs
    assert all(out["labels"][r] != labels[r] for r in rows)  # another class


def test_a_changed_row_takes_the_farthest_row_of_another_kind() -> None:
    """A classifier's score: each changed row takes the changed row farthest from it, of the other sign (another
    class), not its neighbour's; one alone takes the sample's farthest."""
    score = np.array([[0.9], [0.8], [0.7], [-0.6], [-0.9], [0.6]], dtype=np.float32)
    out = _replaced({"score": score}, np.array([0, 1, 3, 4]))
    assert (np.sign(out["score"][[0, 1, 3, 4]]) == -np.sign(score[[0, 1, 3, 4]])).all(), out["score"]
    assert _replaced({"score": score}, np.array([2]))["score"][2] == score[4]


def test_an_output_alike_on_every_row_does_not_stop_the_donors() -> None:
    """A flag alike on every row beside the rows: the changed rows still take real rows (red-team pass 20, FP2)."""
    x = _unit_rows(8)
    out = _replaced({"x": x, "flag": np.zeros(8, dtype=bool)}, np.array([0, 5]))
    assert np.allclose(np.linalg.norm(out["x"], axis=1), 1.0, atol=1e-5) and not (out["flag"]).any()
    assert out["x"][0].tobytes() != x[0].tobytes() and out["x"][5].tobytes() != x[5].tobytes()


def test_a_sample_of_alike_rows_gets_other_values() -> None:
    """Where no row can lend (every row alike), a row is still made wrong: noise, another label, a flipped bool."""
    same = {"x": np.ones((4, 3), dtype=np.float32), "y": np.zeros(4, dtype=np.int64), "b": np.zeros(4, dtype=bool)}
    out = _replaced(same, np.array([0, 2]))
    for name, arr in same.items():
        assert (out[name][[0, 2]] != arr[[0, 2]]).reshape(2, -1).any(axis=1).all(), name
        assert (out[name][[1, 3]] == arr[[1, 3]]).all(), name


@pytest.mark.parametrize(("rows", "checked"), [(8, [0, 1, 2, 3]), (8, [5]), (40, list(range(10))),
                                               (100, [3, 17, 44, 61, 90]), (101, list(range(0, 101, 3)))])
@pytest.mark.parametrize("form", [False, True])
def test_the_search_finds_the_rows_a_spot_check_leaves_unjudged(rows: int, checked: list[int], form: bool) -> None:
    truth = _unit_rows(rows)
    found = power.search(_spot(truth, checked, form), {"x": truth})
    assert found["passed"] is True and found["changed"] >= (rows + 1) // 2, found
    assert not set(found["changed_rows"]) & set(checked) and set(found["judged_rows"]) == set(checked), found
    controls = power.criterion_controls(_spot(truth, checked, form), {"x": truth})
    assert controls["able_to_fail"] is False and controls["search"]["passed"] is True


@pytest.mark.parametrize("rows", [8, 40, 400])
def test_a_criterion_judging_every_row_is_searched_briefly_and_accepted(rows: int) -> None:
    truth = _unit_rows(rows)
    found = power.search(_spot(truth, list(range(rows)), True), {"x": truth})
    assert found["passed"] is False and found["changed"] == 0 and found["calls"] <= power.BUDGET, found
    assert found["judged_rows"] == list(range(rows)) if rows <= 40 else found["stopped"] == "everywhere", found


def test_an_aggregate_with_a_threshold_is_accepted_and_a_majority_refused() -> None:
    """Accuracy >= 0.9 over 100 labels: each small block passes, all of them at once do not."""
    labels = np.arange(100, dtype=np.int64) % 7
    found = power.criterion_controls(lambda o: (float((o["y"] == labels).mean()) >= 0.9, "accuracy"), {"y": labels})
    assert found["able_to_fail"] is True and found["search"]["passed"] is False, found["search"]
    assert found["search"]["calls"] <= power.BUDGET + 1, found["search"]
    # a majority tolerates half its rows wrong: refused (by the halves and the search alike)
    lax = power.criterion_controls(lambda o: (float((o["y"] == labels).mean()) >= 0.5, "accuracy"), {"y": labels})
    assert lax["able_to_fail"] is False and lax["rows"]["passed"] is True


def test_a_binary_classifier_with_wrong_rows_under_a_threshold_is_accepted() -> None:
    """Its wrong rows, which a change makes right, are changed with the others: no row is picked for passing."""
    truth = np.random.default_rng(2).integers(0, 2, 40)
    model = truth.copy()
    model[:8] = 1 - model[:8]  # accuracy 0.8
    found = power.criterion_controls(lambda o: (float((o["y"] == truth).mean()) >= 0.7, "accuracy"), {"y": model})
    assert found["able_to_fail"] is True, found["search"]


def test_a_sample_of_one_class_judged_row_by_row_is_able_to_fail() -> None:
    """No corruption changes one class; its halves do, and it fails them all (red-team pass 20, FF5)."""
    truth = np.ones(8, dtype=np.int64)
    found = power.criterion_controls(lambda o: (bool(np.array_equal(o["y"], truth)), "every row"), {"y": truth})
    assert found["failed"] == [] and found["rows"]["failed_halves"] == 10 and found["able_to_fail"] is True


def test_outputs_of_different_row_counts_are_not_searched() -> None:
    found = power.search(lambda o: (True, "any"), {"a": np.zeros((3, 2)), "b": np.zeros((4, 2))})
    assert found["applies"] is False and found["calls"] == 0


def test_the_refusal_names_the_rows_gathered_and_the_rows_judged() -> None:
    from kernodeck.inenv import judge

    truth = _unit_rows(8)
    found = power.criterion_controls(_spot(truth, [0, 1, 2, 3]), {"x": truth})
    said = judge._unable(found)
    assert ("it cannot see 4 of its 8 rows changed at once, each to another row's values (rows 4, 5, 6, 7: 4 rows "
            "right): it does not judge them (the rows it failed on alone: 0, 1, 2, 3)") in said, said
