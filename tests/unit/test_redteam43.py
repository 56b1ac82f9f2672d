"""Red-team pass 43 (5f936c3: pass 42's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

LOCK2 (installer reads other requirements than the check; lockfile.parse_text vs pip's req_file.break_args_options):
Kernodeck takes every token of a logical line that is not ``--hash…`` as the requirement, wherever it stands, so a
marker written AFTER the hash option (``a==1.0 --hash=sha256:… ; sys_platform == "win32"``, on one line or continued)
is the pin's marker to Kernodeck (the wheelhouse skips the pin here, the twin records the marker). pip splits the line
at its first token starting with ``-``: everything after is options, and optparse drops the leftover ``; …`` words
silently, so pip reads ``a==1.0`` with NO marker and installs it on every platform. The seal (recomputed, as any writer
of the lock does) holds. CONTROL1: the same marker before the hash is read the same by both.

LOCK3 (installer reads other requirements than the check; pip's req_file.expand_env_variables): pip replaces
``${NAME}`` (upper-case letters, digits, ``_``) in every line of a requirements file by the installer's environment
variable before it parses the line; Kernodeck reads the text as written. A marker ``sys_platform == "${SOME_VAR}"`` is
false everywhere to Kernodeck's reading (the pin skipped by the wheelhouse, written so in the twin) and, with
``SOME_VAR=linux`` in the environment of ``pip install -r`` (rebuild's, export's procedure, pip-audit), true to pip's:
the package is installed. The same holds for any quoted marker value. CONTROL2: the same marker with the value written
out is read the same by both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.markers import Marker

from kernodeck.lock import lockfile

# --- LOCK2, LOCK3 ----------------------------------------------------------------------------------------------------

HASH = "a" * 64


def _sealed(body: str) -> str:
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", "cp311-linux_x86_64-cpu"),
              ("packages", "2")]
    return lockfile.seal(lockfile.render(header, body + f"b==2.0 --hash=sha256:{'b' * 64}\n"))


def _applying(tmp_path: Path, first: str) -> tuple[list[str], list[str]]:
    """(the pins Kernodeck's reading applies here, the requirements pip installs here) of one sealed lock."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.constructors import install_req_from_parsed_requirement
    from pip._internal.req.req_file import parse_requirements

    path = tmp_path / "cp311-linux_x86_64-cpu.txt"
    path.write_text(_sealed(first), encoding="utf-8")
    ours = [pin.spec for pin in lockfile.read(path).pins  # its seal checked
            if not pin.marker or Marker(pin.marker).evaluate()]
    reqs = [install_req_from_parsed_requirement(req) for req in parse_requirements(str(path), session=PipSession())]
    theirs = [f"{req.name}=={next(iter(req.specifier)).version}" for req in reqs if req.match_markers()]
    return ours, theirs


OTHER = "win32" if sys.platform != "win32" else "linux"
AFTER = f'a==1.0 --hash=sha256:{HASH} ; sys_platform == "{OTHER}"\n'
AFTER_CONTINUED = f'a==1.0 \\\n    --hash=sha256:{HASH} \\\n    ; sys_platform == "{OTHER}"\n'
BEFORE = f'a==1.0 ; sys_platform == "{OTHER}" \\\n    --hash=sha256:{HASH}\n'


@pytest.mark.parametrize("first", [AFTER, AFTER_CONTINUED], ids=["one-line", "continued"])
def test_lock2_premise_a_marker_after_the_hash_is_the_pins_marker_to_kernodeck(tmp_path: Path, first: str) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(_sealed(first), encoding="utf-8")
    pin = lockfile.read(path).pins[0]  # accepted, its seal holding
    assert (pin.spec, pin.marker) == ("a==1.0", f'sys_platform == "{OTHER}"')


@pytest.mark.xfail(strict=True, reason="LOCK2: pip ends the requirement at the first option; a marker after --hash "
                   "is dropped and the pin installed everywhere, while Kernodeck reads it as the pin's marker")
@pytest.mark.parametrize("first", [AFTER, AFTER_CONTINUED], ids=["one-line", "continued"])
def test_lock2_a_marker_after_the_hash_is_read_the_same_by_pip(tmp_path: Path, first: str) -> None:
    ours, theirs = _applying(tmp_path, first)
    assert ours == theirs


def test_control1_a_marker_before_the_hash_is_read_the_same_by_both(tmp_path: Path) -> None:
    ours, theirs = _applying(tmp_path, BEFORE)
    assert ours == theirs == ["b==2.0"]


VARIABLE = f'a==1.0 ; sys_platform == "${{RT43_PLATFORM}}" \\\n    --hash=sha256:{HASH}\n'


def test_lock3_premise_kernodeck_reads_the_variable_as_written(tmp_path: Path) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(_sealed(VARIABLE), encoding="utf-8")
    pin = lockfile.read(path).pins[0]
    assert pin.marker == 'sys_platform == "${RT43_PLATFORM}"'
    assert not Marker(pin.marker).evaluate()


@pytest.mark.xfail(strict=True, reason="LOCK3: pip expands ${NAME} from the installer's environment in every line; "
                   "Kernodeck reads the marker as written, so the pin it skips here pip installs")
def test_lock3_an_environment_variable_in_a_marker_is_read_the_same_by_pip(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RT43_PLATFORM", sys.platform)
    ours, theirs = _applying(tmp_path, VARIABLE)
    assert ours == theirs


def test_control2_the_value_written_out_is_read_the_same_by_both(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RT43_PLATFORM", sys.platform)
    ours, theirs = _applying(tmp_path, VARIABLE.replace("${RT43_PLATFORM}", sys.platform))
    assert ours == theirs == ["a==1.0", "b==2.0"]
