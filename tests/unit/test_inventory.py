"""The env's packages against the lock (kernodeck/env/inventory.py)."""

from __future__ import annotations

from pathlib import Path

from kernodeck.env import inventory


def test_inventory_diff_and_markers() -> None:
    observed = inventory.parse_freeze("numpy==2.0\ntorch==2.13.0+cpu\nextra==1\nlocal @ file:///x\n")
    delta = inventory.diff({"numpy": "2.0", "torch": "2.14.1", "gone": "1"}, observed)
    assert delta.changed == {"torch": ("2.14.1", "2.13.0+cpu")}
    assert set(delta.added) == {"extra", "local"} and delta.removed == {"gone": "1"}
    assert not delta.empty and "torch 2.14.1 -> 2.13.0+cpu" in delta.summary()
    assert inventory.diff({"a": "1"}, {"a": "1"}).empty


def test_inventory_read_from_outside_names_each_version_and_each_distribution_without_a_record(
    tmp_path: Path,
) -> None:
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    (env / "pyvenv.cfg").parent.mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n", encoding="utf-8")
    for name, version, record in (("Alpha", "1.0", True), ("beta", "2.5", False), ("gamma", "3", "folder")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n",
                                       encoding="utf-8")
        if record is True:
            (info / "RECORD").write_text(f"{name}/__init__.py,,\n", encoding="utf-8")
        elif record == "folder":
            (info / "RECORD").mkdir()  # not a file: no RECORD to hold the files to
    seen = inventory.observe_outside(env)
    assert seen.packages == {"alpha": "1.0", "beta": "2.5", "gamma": "3"}
    assert seen.unrecorded == ["beta", "gamma"]
