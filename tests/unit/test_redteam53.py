"""Red-team pass 53 (notes: /work/notes/redteam53.md): what the closed world accepts as the system's without comparing
it with the reference, and the honest reads of a common machine it refuses (measured in real sessions; these tests
reproduce each finding without a built env).

TZ3 (an undeclared input through the time zone exemption, recorded nowhere: FALSE closed world, verify PASSED; and a
changed one unnamed; inenv/application.run_entry, inenv/systemfiles.record, inenv/world._stranger): a file of the
database read in any window is exempt (world._stranger -> systemfiles.record into ``ctx.state``), but only the
application step's details copy ``ctx.state[system_files]`` (run_entry, when the entry's call ends), and only they
reach system.json (verify/writer._system_record). What the criterion's window (or a determinism rerun, the
resume-application's calls, a thread read late) reads there afterwards is in no record. A compiled zone is a TZif
header; the bytes after its data are anything. Measured in a real session: /usr/share/zoneinfo/Etc/RT53 = Etc/UTC's
bytes + ``\\n-1.0\\n`` (zoneinfo.ZoneInfo("Etc/RT53") loads it), checks/app.py's ``criterion`` fails when the
smallest margin is under the number after the last newline there; ``reference -- --new``, ``verify --
--no-rebuild``: ``PASSED: 13 passed, 1 skipped``, no file of the run or the reference names RT53 (grep). Tail set to
``1.0``: ``FAILED at criterion``, "What differs from the reference": "system chain: the same as the reference's",
**Likely cause**: "look at the code, data or weights". Fix idea (by class: an exemption recorded where it is granted,
in every window): each step names the zone files its windows read (steprun's one step rule, as it holds the other
invariants) and the system record takes them from every step; the test pins that contract (adapt it to another
place if the fix records them elsewhere, e.g. once at the runner's end).

TZ4 (the system's own zone setting refused where it is not a link: a FALSE FAILURE on common images;
inenv/world._stranger, inenv/systemfiles.is_data): ``/etc/localtime`` is accepted only as the file it links to (in the
database's folder). Where an image copies the zone there (a regular file), a Python reader of it (dateutil's
``tz.gettz()`` with no name opens ``/etc/localtime``; tzlocal's ``get_localzone`` too) is "undeclared, outside the
project", though the system step already records its bytes (TZ2's fix: ``localtime_sha256``). ``/etc/timezone``
(Debian and Ubuntu's zone name, which tzlocal reads first, before ``/etc/localtime``) is refused on every such machine,
link or not. Measured by the judgement (world._stranger) only: this machine's /etc/localtime is a link; the env has no
tzlocal or dateutil. Fix idea: the zone's setting files (``/etc/localtime`` when TZif, ``/etc/timezone``) are the
system chain's like the database, their sha256 in ``time_zone`` (compared with the reference's).

FF1 (honest reads of the machine's configuration and the user's credentials refused: a FALSE FAILURE whose TIP asks to
fingerprint a credential; inenv/world._stranger, inenv/advice): measured in a real session, checks/app.py's ``run``
calling ``mimetypes.guess_type("x.json")`` (its lazy init opens every file of ``mimetypes.knownfiles`` that exists:
``/etc/mime.types`` here, on every Debian/Ubuntu with media-types) and ``huggingface_hub.hf_hub_download(repo, file,
local_files_only=True)`` (which builds its headers first: ``get_token`` opens ``$HF_HOME/token``, the user's login,
even offline), ``HF_HOME=/tmp/rt53/hf`` holding a token: "FAILED at application: the entry read files that are not
declared sources: /etc/mime.types (opened), /tmp/rt53/hf/token (opened): a file outside the project and the env is
declared as a source: [tool.kernodeck.application.data.NAME] ...", TIP ``nox -s reference -- --new``: declaring the
token as a data source puts its sha256 into the reference. (``/etc/os-release``, read by
``platform.freedesktop_os_release``, was not named: the system step had filled platform's cache before the window; and
``platform.platform()`` starts ``uname -p`` unless that cache is filled: order-dependent, measured outside only.) Fix
idea by class: the system's configuration files the standard library reads by name (``mimetypes.knownfiles``,
``/etc/os-release``) accepted as the system chain's with their sha256 recorded and compared (as the zone files), and a
credential the hub reads (``$HF_HOME/token``, ``HF_TOKEN_PATH``) accepted as a credential, recorded by presence only
(never hashed into a record), never advised as a data source.

Fixed (kernodeck/inenv/systemfiles.py): each step records the system files its windows read (steprun.run) and
system.json gathers every step's (TZ3); a copied /etc/localtime holding a zone, /etc/timezone, mimetypes.knownfiles
and os-release are the system's, recorded by sha256 and compared with the reference's (TZ4, FF1); the hub's login is
a credential, recorded as read and never hashed (FF1).
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import steprun, systemfiles
from kernodeck.inenv._common import Context
from kernodeck.inenv.protocol import SYSTEM_FILES, StepKey
from tests.helpers.closedworld import bare_context, stranger, without_invariants

_UTC = Path("/usr/share/zoneinfo/Etc/UTC")
needs_utc = pytest.mark.skipif(not _UTC.is_file(), reason="no /usr/share/zoneinfo/Etc/UTC on this machine")




# TZ3 -----------------------------------------------------------------------------------------------------------------
@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """steprun.run without the invariants held after a step (libraries, settings: not what is tested here)."""
    without_invariants(monkeypatch)


def _zone_with_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A compiled zone with a number after its data, in a folder of the database (as /usr/share/zoneinfo/Etc/RT53)."""
    folder = tmp_path / "zoneinfo"
    folder.mkdir()
    monkeypatch.setattr(systemfiles, "FOLDERS", (os.path.realpath(folder) + os.sep,))
    zone = folder / "RT53"
    zone.write_bytes(_UTC.read_bytes() + b"\n1.0\n")
    return zone


def _criterion_reading(ctx: Context, zone: Path) -> dict[str, Any]:
    """The criterion step as the runner runs it, its window reading ``zone`` (the judgement world's window makes)."""
    def criterion() -> dict[str, Any]:
        assert stranger(ctx, str(zone)) is None  # exempt: the system's time zone database
        return {"passed": True}

    return steprun.run(ctx, "criterion", criterion)


@needs_utc
def test_tz3_premise_a_zone_with_a_tail_read_by_the_criterion_is_exempt_and_in_no_steps_details(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare_steps: None) -> None:
    zone = _zone_with_tail(tmp_path, monkeypatch)
    assert systemfiles.is_data(str(zone))  # its first bytes are a zone's: what follows its data is anything
    ctx = bare_context(tmp_path)
    result = _criterion_reading(ctx, zone)
    assert result[StepKey.STATUS] == "passed"
    assert str(zone) in ctx.state[SYSTEM_FILES]  # noted in the process (before the fix: in no step's record)


@needs_utc
def test_tz3_the_step_whose_window_read_a_zone_file_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             bare_steps: None) -> None:
    zone = _zone_with_tail(tmp_path, monkeypatch)
    result = _criterion_reading(bare_context(tmp_path), zone)
    assert str(zone) in result[StepKey.DETAILS].get(SYSTEM_FILES, {})


@needs_utc
def test_tz3_control_a_step_that_read_no_zone_names_none_and_a_text_file_there_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare_steps: None) -> None:
    zone = _zone_with_tail(tmp_path, monkeypatch)
    ctx = bare_context(tmp_path)
    result = steprun.run(ctx, "criterion", lambda: {"passed": True})
    assert SYSTEM_FILES not in result[StepKey.DETAILS]
    text = zone.with_name("offset")
    text.write_text("1.0\n", encoding="utf-8")
    assert stranger(ctx, str(text)) == {"file": str(text), "declare": "outside the project"}  # TZ1's fix holds


# TZ4 -----------------------------------------------------------------------------------------------------------------
def _copied_localtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> Path:
    """/etc/localtime as an image that copies the zone there has it: a regular file (systemfiles.LOCALTIME moved)."""
    localtime = tmp_path / "etc" / "localtime"
    localtime.parent.mkdir()
    localtime.write_bytes(content)
    monkeypatch.setattr(systemfiles, "LOCALTIME", str(localtime))
    monkeypatch.delenv("TZ", raising=False)
    return localtime


@needs_utc
def test_tz4_premise_a_copied_localtime_is_recorded_by_its_bytes_and_refused_when_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    localtime = _copied_localtime(tmp_path, monkeypatch, _UTC.read_bytes())
    chain = systemfiles.chain()
    assert chain["localtime"] == str(localtime) and "localtime_sha256" in chain  # the system chain's record (TZ2)
    assert not localtime.is_symlink()  # a copy: before the fix, dateutil's gettz() reading it was undeclared


@needs_utc
def test_tz4_a_copied_localtime_is_the_systems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    localtime = _copied_localtime(tmp_path, monkeypatch, _UTC.read_bytes())
    assert stranger(bare_context(tmp_path), str(localtime)) is None


@needs_utc
def test_tz4_control_a_linked_localtime_is_the_systems_and_a_text_file_at_its_place_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = bare_context(tmp_path)
    linked = tmp_path / "linked"
    linked.symlink_to(_UTC)
    assert stranger(ctx, str(linked)) is None  # judged by the zone it opens
    text = _copied_localtime(tmp_path, monkeypatch, b"1.0\n")
    assert stranger(ctx, str(text)) is not None  # no zone: an input, whatever its name


# FF1 -----------------------------------------------------------------------------------------------------------------
_MIME = "/etc/mime.types"
needs_mime = pytest.mark.skipif(not Path(_MIME).is_file(), reason="no /etc/mime.types on this machine")


@pytest.fixture
def hub_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HF_HOME`` holding a login, as ``huggingface-cli login`` leaves it (``get_token`` reads ``$HF_HOME/token``)."""
    home = tmp_path / "hf"
    home.mkdir()
    (home / "token").write_text("hf_not_a_real_token\n", encoding="utf-8")
    monkeypatch.setenv("HF_HOME", str(home))
    return home


@needs_mime
def test_ff1_premise_the_machines_mime_table_and_the_hub_login_are_refused_as_inputs_to_declare(
        tmp_path: Path, hub_home: Path) -> None:
    assert _MIME in mimetypes.knownfiles  # what mimetypes.init (guess_type's first call) opens where it exists
    assert (hub_home / "token").is_file()  # what get_token reads (before the fix both were "declare a data source")


@needs_mime
def test_ff1_the_machines_mime_table_is_the_systems(tmp_path: Path) -> None:
    assert stranger(bare_context(tmp_path), _MIME) is None


def test_ff1_the_hub_login_is_no_input_to_declare(tmp_path: Path, hub_home: Path) -> None:
    assert stranger(bare_context(tmp_path), str(hub_home / "token")) is None


def test_ff1_control_a_file_beside_the_login_and_a_project_file_stay_inputs(tmp_path: Path, hub_home: Path) -> None:
    ctx = bare_context(tmp_path)
    data = hub_home / "offsets.txt"
    data.write_text("0.01\n", encoding="utf-8")
    assert stranger(ctx, str(data)) == {"file": str(data), "declare": "outside the project"}
    project_file = Path(ctx.config["project_root"]) / "table.csv"
    project_file.write_text("a,b\n", encoding="utf-8")
    assert stranger(ctx, str(project_file)) == {"file": "table.csv", "declare": "files"}
