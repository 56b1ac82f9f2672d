"""The system's own files read by name (the time zone database first) as the closed world and the system chain see
them (kernodeck/inenv/systemfiles.py).

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

from kernodeck.inenv import systemfiles
from tests.helpers.closedworld import _closed_project, _run, _with_criterion

UTC = next((os.path.join(f, "UTC") for f in systemfiles.FOLDERS if os.path.isfile(os.path.join(f, "UTC"))), None)
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
    assert not systemfiles.is_data(str(fake))


@needs_database
def test_a_link_is_judged_by_the_file_it_opens(tmp_path: Path) -> None:
    into = tmp_path / "into"
    into.symlink_to(str(UTC))
    assert systemfiles.is_data(str(into))  # a link to the database opens the database's file
    out = tmp_path / "out.txt"
    out.write_text("data")
    assert not systemfiles.is_data(str(out)) and not systemfiles.is_data(str(tmp_path))


@needs_database
def test_each_file_read_is_recorded_with_its_sha256() -> None:
    ctx: Any = SimpleNamespace(state={})
    systemfiles.record(ctx, str(UTC))
    real = os.path.realpath(str(UTC))
    assert ctx.state[systemfiles.FILES] == {real: hashlib.sha256(Path(real).read_bytes()).hexdigest()}


def test_the_chain_records_the_zone_and_the_database_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    chain = systemfiles.chain()
    assert chain["TZ"] == "Europe/Amsterdam"
    assert {"TZ", "localtime", "database_version"} <= set(chain)
    assert ("localtime_sha256" in chain) == os.path.lexists(systemfiles.LOCALTIME)
    monkeypatch.delenv("TZ")
    assert systemfiles.chain()["TZ"] == "(unset)"
    zi = next((Path(f) / "tzdata.zi" for f in systemfiles.FOLDERS if (Path(f) / "tzdata.zi").is_file()), None)
    if zi is not None:
        assert chain["database_version"] == zi.read_text(encoding="utf-8").splitlines()[0].removeprefix("# version ")


def test_a_zone_named_by_tz_as_a_file_is_recorded_by_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zone = tmp_path / "zone"
    zone.write_bytes(b"TZif2 one")
    monkeypatch.setenv("TZ", f":{zone}")
    first = systemfiles.chain()["TZ_sha256"]
    zone.write_bytes(b"TZif2 another")
    assert systemfiles.chain()["TZ_sha256"] != first
    monkeypatch.setenv("TZ", "Europe/Amsterdam")
    assert "TZ_sha256" not in systemfiles.chain()


def test_only_zones_and_the_database_index_are_the_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative of the exemption: a file in a database folder that is no compiled zone stays an input."""
    folder = tmp_path / "zoneinfo"
    (folder / "Europe").mkdir(parents=True)
    monkeypatch.setattr(systemfiles, "FOLDERS", (os.path.realpath(folder) + os.sep,))
    (folder / "Europe" / "Amsterdam").write_bytes(b"TZif2 rules")
    (folder / "zone1970.tab").write_text("NL\t+5222+00454\tEurope/Amsterdam\n", encoding="utf-8")
    (folder / "Europe" / "zone1970.tab").write_text("1.5\n", encoding="utf-8")  # an index's name, not at the top
    (folder / "numbers.csv").write_text("1.5\n", encoding="utf-8")
    assert systemfiles.is_data(str(folder / "Europe" / "Amsterdam"))
    assert systemfiles.is_data(str(folder / "zone1970.tab"))
    assert not systemfiles.is_data(str(folder / "numbers.csv"))
    assert not systemfiles.is_data(str(folder / "Europe" / "zone1970.tab"))


def test_the_hub_login_is_recorded_as_read_and_never_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "hf"
    home.mkdir()
    (home / "token").write_text("hf_not_a_real_token\n", encoding="utf-8")
    (home / "notes.txt").write_text("1.5\n", encoding="utf-8")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    assert systemfiles.is_data(str(home / "token")) and not systemfiles.is_data(str(home / "notes.txt"))
    ctx: Any = SimpleNamespace(state={})
    systemfiles.record(ctx, str(home / "token"))
    assert ctx.state[systemfiles.FILES] == {os.path.realpath(home / "token"): systemfiles.CREDENTIAL}


def test_a_step_records_the_system_files_its_windows_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step, not only the application's (red-team pass 53, TZ3): what it read, not what earlier steps did."""
    from kernodeck.inenv import steprun
    from tests.helpers.closedworld import bare_context, without_invariants

    without_invariants(monkeypatch)
    ctx = bare_context(tmp_path)
    ctx.state[systemfiles.FILES] = {"/earlier": "a" * 64}

    def criterion() -> dict[str, Any]:
        ctx.state[systemfiles.FILES]["/usr/share/zoneinfo/UTC"] = "b" * 64
        return {"passed": True}

    details = steprun.run(ctx, "criterion", criterion)["details"]
    assert details[systemfiles.FILES] == {"/usr/share/zoneinfo/UTC": "b" * 64}
    assert systemfiles.FILES not in steprun.run(ctx, "criterion", lambda: {"passed": True})["details"]


def test_a_localtime_that_is_no_regular_file_is_named_not_read(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO at /etc/localtime's place: opening it would block the system step forever; it is named instead."""
    fifo = tmp_path / "localtime"
    os.mkfifo(fifo)
    monkeypatch.setattr(systemfiles, "LOCALTIME", str(fifo))
    assert systemfiles.chain()["localtime_sha256"] == "not a regular file"
