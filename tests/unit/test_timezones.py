"""The system's time zone database as the closed world and the system chain see it (kernodeck/inenv/timezones.py).

Found on a lent H200: pandas' import asks dateutil for UTC, which reads ``/usr/share/zoneinfo/UTC``; every verify of
a project whose env holds pandas failed its application step naming that file. A read there is the system chain's:
accounted for, recorded with its sha256, the zone and the database's version in system.json.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck.inenv import timezones
from tests.helpers.closedworld import _closed_project, _run, _with_criterion

UTC = next((os.path.join(f, "UTC") for f in timezones.FOLDERS if os.path.isfile(os.path.join(f, "UTC"))), None)
CODE = ["src/mypkg/*.py"]  # the closed project's package, declared: the criterion's read is the only one judged
needs_database = pytest.mark.skipif(UTC is None, reason="no system time zone database on this machine")


@needs_database
def test_a_criterion_reading_the_zone_database_as_dateutil_does_passes(tmp_path: Path) -> None:
    config = _with_criterion(_closed_project(tmp_path, code=CODE), f"open({UTC!r}, 'rb').read(4)", code=CODE)
    assert _run(tmp_path, config) == {"status": "passed"}


def test_the_same_name_outside_the_database_is_still_undeclared(tmp_path: Path) -> None:
    """The negative: a file is the database's by where it lies (its real path), not by its name."""
    fake = tmp_path / "elsewhere" / "usr" / "share" / "zoneinfo" / "UTC"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"TZif2")
    config = _with_criterion(_closed_project(tmp_path, code=CODE), f"open({str(fake)!r}, 'rb').read(4)", code=CODE)
    result = _run(tmp_path, config)
    assert result["status"] == "failed" and "usr/share/zoneinfo/UTC (opened)" in result["error"]
    assert not timezones.is_data(str(fake))


@needs_database
def test_a_link_is_judged_by_the_file_it_opens(tmp_path: Path) -> None:
    into = tmp_path / "into"
    into.symlink_to(str(UTC))
    assert timezones.is_data(str(into))  # a link to the database opens the database's file
    out = tmp_path / "out.txt"
    out.write_text("data")
    assert not timezones.is_data(str(out)) and not timezones.is_data(str(tmp_path))


@needs_database
def test_each_file_read_is_recorded_with_its_sha256() -> None:
    ctx: Any = SimpleNamespace(state={})
    timezones.record(ctx, str(UTC))
    real = os.path.realpath(str(UTC))
    assert ctx.state[timezones.FILES] == {real: hashlib.sha256(Path(real).read_bytes()).hexdigest()}


def test_the_chain_records_the_zone_and_the_database_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    chain = timezones.chain()
    assert chain["TZ"] == "Europe/Amsterdam"
    assert {"TZ", "localtime", "database_version"} <= set(chain)
    assert ("localtime_sha256" in chain) == os.path.lexists(timezones.LOCALTIME)
    monkeypatch.delenv("TZ")
    assert timezones.chain()["TZ"] == "(unset)"
    zi = next((Path(f) / "tzdata.zi" for f in timezones.FOLDERS if (Path(f) / "tzdata.zi").is_file()), None)
    if zi is not None:
        assert chain["database_version"] == zi.read_text(encoding="utf-8").splitlines()[0].removeprefix("# version ")


def test_a_zone_named_by_tz_as_a_file_is_recorded_by_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zone = tmp_path / "zone"
    zone.write_bytes(b"TZif2 one")
    monkeypatch.setenv("TZ", f":{zone}")
    first = timezones.chain()["TZ_sha256"]
    zone.write_bytes(b"TZif2 another")
    assert timezones.chain()["TZ_sha256"] != first
    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    assert "TZ_sha256" not in timezones.chain()


def test_only_zones_and_the_database_index_are_the_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative of the exemption: a file in a database folder that is no compiled zone stays an input."""
    folder = tmp_path / "zoneinfo"
    (folder / "Europe").mkdir(parents=True)
    monkeypatch.setattr(timezones, "FOLDERS", (os.path.realpath(folder) + os.sep,))
    (folder / "Europe" / "Amsterdam").write_bytes(b"TZif2 rules")
    (folder / "zone1970.tab").write_text("NL\t+5222+00454\tEurope/Amsterdam\n", encoding="utf-8")
    (folder / "Europe" / "zone1970.tab").write_text("1.5\n", encoding="utf-8")  # an index's name, not at the top
    (folder / "numbers.csv").write_text("1.5\n", encoding="utf-8")
    assert timezones.is_data(str(folder / "Europe" / "Amsterdam")) and timezones.is_data(str(folder / "zone1970.tab"))
    assert not timezones.is_data(str(folder / "numbers.csv"))
    assert not timezones.is_data(str(folder / "Europe" / "zone1970.tab"))
