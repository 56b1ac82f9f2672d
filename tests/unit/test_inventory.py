"""The env's packages against the lock (kernodeck/env/inventory.py)."""

from __future__ import annotations

from kernodeck.env import inventory


def test_inventory_diff_and_markers() -> None:
    observed = inventory.parse_freeze("numpy==2.0\ntorch==2.13.0+cpu\nextra==1\nlocal @ file:///x\n")
    delta = inventory.diff({"numpy": "2.0", "torch": "2.14.1", "gone": "1"}, observed)
    assert delta.changed == {"torch": ("2.14.1", "2.13.0+cpu")}
    assert set(delta.added) == {"extra", "local"} and delta.removed == {"gone": "1"}
    assert not delta.empty and "torch 2.14.1 -> 2.13.0+cpu" in delta.summary()
    assert inventory.diff({"a": "1"}, {"a": "1"}).empty
