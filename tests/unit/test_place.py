"""Where each locked file is found (kernodeck/lock/place.py): a hash no source holds refused by name, the network
blamed only when it is the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.errors import LockFailed
from kernodeck.lock import index_client, lockfile, place, twin
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from kernodeck.sources import Source
from tests.helpers.project import ROOT

PROJECT = load_project(ROOT)
CPU = parse_platform_id(PROJECT, "cp311-linux_x86_64-cpu")


def test_a_hash_no_source_holds_is_refused_by_name(tmp_path: Path) -> None:
    pin = lockfile.Pin("kdtiny-nowhere", "1.0", "", ("c" * 64,), 5)
    with pytest.raises(LockFailed, match=r"kdtiny-nowhere \(1 hash") as err:
        place.locate([pin], CPU, [Source("find-links", str(tmp_path))], no_index=True)
    assert "--pylock-only" in err.value.tip


class _NoNetwork(index_client.Fetcher):
    """A fetcher that records what it was asked and answers nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        self.asked.append(name)
        raise OSError("no network in this test")


def test_relock_reuses_the_files_its_pylock_already_places() -> None:
    lock = lockfile.read(ROOT / "lockfiles" / f"{CPU.id}.txt")
    known = twin.known_files(ROOT / "lockfiles" / CPU.pylock_name)
    assert all(h in known for pin in lock.pins for h in pin.hashes)
    fetcher = _NoNetwork()
    files = place.locate(lock.pins, CPU, [], no_index=False, fetcher=fetcher, known=known)
    assert fetcher.asked == [] and sum(len(v) for v in files.values()) == sum(len(p.hashes) for p in lock.pins)
    # a hash the twin does not place is looked up (and here, with no network, refused by name)
    first = lock.pins[0]
    changed = lockfile.Pin(first.name, first.version, first.marker, ("0" * 64,), first.line)
    fetcher = _NoNetwork()
    with pytest.raises(LockFailed, match=first.name):
        place.locate([changed], CPU, [], no_index=False, fetcher=fetcher, known=known)
    assert first.name in fetcher.asked


class _Unreachable(index_client.Fetcher):
    """A fetcher for which every index is out of reach (as the real one records it)."""

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        self.unreachable[index] = "no network in this test"
        raise OSError(self.unreachable[index])


class _Lists(index_client.Fetcher):
    """A fetcher whose indexes answer, listing ``files`` for every name."""

    def __init__(self, files: list[index_client.DistFile]) -> None:
        super().__init__()
        self.files = files

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        return self.files


def _first_pin_and_twin() -> tuple[lockfile.Pin, dict[str, index_client.DistFile]]:
    lock = lockfile.read(ROOT / "lockfiles" / f"{CPU.id}.txt")
    return lock.pins[0], twin.known_files(ROOT / "lockfiles" / CPU.pylock_name)


def test_a_hash_added_by_hand_is_named_as_such_not_blamed_on_the_network() -> None:
    """--pylock-only after a hash was added to a pin the twin places: the cause is the added hash, even offline."""
    pin, known = _first_pin_and_twin()
    added = lockfile.Pin(pin.name, pin.version, pin.marker, (*pin.hashes, "0" * 64), pin.line)
    with pytest.raises(LockFailed) as refused:
        place.locate([added], CPU, [], no_index=False, fetcher=_Unreachable(), known=known)
    message, tip = str(refused.value), refused.value.tip
    assert f"first {pin.name} (1 hash(es), e.g. sha256:0000000000000000" in message
    assert "added to the lock after the twin was written (by hand?)" in message
    assert tip.endswith(f"nox -s lock -- --platform {CPU.id}") and "reached" not in tip, tip


def test_a_hash_no_reachable_index_lists_is_not_a_published_file() -> None:
    """Every index answered and none lists the hash among the pin's files: no network to blame."""
    pin, known = _first_pin_and_twin()
    stranger = lockfile.Pin(pin.name, pin.version, pin.marker, ("0" * 64,), pin.line)
    listed = [known[h] for h in pin.hashes]
    with pytest.raises(LockFailed) as refused:
        place.locate([stranger], CPU, [], no_index=False, fetcher=_Lists(listed), known={})
    assert f"no file of {pin.name} {pin.version} that pypi.org" in str(refused.value)
    assert "not the hash of a published file" in str(refused.value) and "unreachable" not in str(refused.value)
    assert "reached" not in refused.value.tip and "--pylock-only" not in refused.value.tip


def test_the_network_is_named_only_when_it_is_the_cause() -> None:
    """The control: a hash nothing known places and no index could be asked for: rerun where they can be reached."""
    pin, _ = _first_pin_and_twin()
    stranger = lockfile.Pin(pin.name, pin.version, pin.marker, ("0" * 64,), pin.line)
    with pytest.raises(LockFailed) as refused:
        place.locate([stranger], CPU, [], no_index=False, fetcher=_Unreachable(), known={})
    assert "unreachable (no network in this test)" in str(refused.value)
    assert "added to the lock" not in str(refused.value)
    assert "can be reached" in refused.value.tip and "--pylock-only" in refused.value.tip
