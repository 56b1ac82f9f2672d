"""Red-team pass 65 (notes: /work/notes/redteam65.md): the closed world and verified bytes, by class (reads through
paths the audit hook sees under another name, the import machinery's variants, the trusted homes): HOMELINK1.

HOMELINK1 (the links on the way to a trusted home are not held; kernodeck/inenv/paths.py ``opened``/``trusted``,
kernodeck/inenv/homes.py, kernodeck/inenv/guard.py): a path that lies in a home AS WRITTEN (the env's prefix, the
base interpreter's standard library) is trusted at once, with no link on it resolved (one prefix test for the env's
thousands of files). When the base's prefix is reached through a link (a minor-version link of uv's or mise's
installed Pythons, Homebrew's ``opt/`` link, any ``~/py311 -> ...``: ``sysconfig.get_path("stdlib")`` is then the
path through the link), the application can remove that link and make it again onto any folder (neither is refused:
the guard knows the homes, not the links above them; a link made is judged by what each read through it opens, and
that read is trusted by its path), read ``<stdlib>/anything`` (an undeclared file from anywhere: recorded nowhere,
refused by nothing), and put the link back before its call returns. Measured through the real hook (the closed
project's criterion, run by a venv of a base reached through a link): the undeclared file read so passes; the same
file read by its own path is refused (the control). Moving the link (``os.replace``) is refused by over-approximation
(a link moved is walked as the folder it names). The env's own prefix is reached through no link in verify (the
project root is resolved, the env's folder named by CURRENT), but a ``venv-root`` through a link would be the same.
Not a stated limit: docs/application.md states the standard library trusted (a user-writable one could be altered),
not that any file can be read unseen through its path. Fix idea by class: take the links on the way to each home (as
``links.take`` does for the declared names) before the application's code runs and hold them after each window; or
trust a path as written only under a home whose written and resolved forms are one (no link on the way), resolving
the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.closedworld import criterion_doing, linked_base_venv, swapped_read

SECRET = "threshold=0.7\n"
STDLIB = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}"


def _linked_base_venv(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the venv's python, the link, a stash holding ``<stdlib>/secret.txt``)."""
    venv, link, stash = linked_base_venv(tmp_path, f"{STDLIB}/secret.txt", SECRET)
    return venv / "bin" / "python", link, stash


def _criterion_doing(tmp_path: Path, doing: str, python: Path) -> dict[str, object]:
    return criterion_doing(tmp_path, doing, python)


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="links and the audit hook's paths as on Linux")


def test_homelink1_premise_the_stdlib_as_written_goes_through_the_link(tmp_path: Path) -> None:
    python, link, _ = _linked_base_venv(tmp_path)
    done = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == str(link / STDLIB)


def test_homelink1_control_the_stashed_file_by_its_own_path_is_refused(tmp_path: Path) -> None:
    python, _, stash = _linked_base_venv(tmp_path)
    result = _criterion_doing(tmp_path, f"open({str(stash / STDLIB / 'secret.txt')!r}).read()", python)
    assert result["status"] == "failed", result
    assert "secret.txt" in str(result["error"]), result


def test_homelink1_a_file_read_through_a_replaced_link_to_the_stdlib_is_judged(tmp_path: Path) -> None:
    """HOMELINK1 (fixed): a home reached through a link is trusted by the file a path there opens (homes.READ_HOMES)."""
    python, link, stash = _linked_base_venv(tmp_path)
    real = os.readlink(link)
    result = _criterion_doing(tmp_path, swapped_read(link, stash, link / STDLIB / "secret.txt", SECRET), python)
    assert os.readlink(link) == real  # the link is put back: nothing is left to see after the call
    assert result["status"] == "failed", result  # was: passed, the stash's file read and recorded nowhere
    assert "secret.txt" in str(result["error"]), result


def test_homelink1_control_the_stdlib_through_its_link_is_still_trusted(tmp_path: Path) -> None:
    """The honest case under the fix: modules and files of the stdlib read through the link (every import there) are
    the base's, resolved, and pass."""
    python, link, _ = _linked_base_venv(tmp_path)
    doing = (f"import decimal, fractions; value = open({str(link / STDLIB / 'this.py')!r}).read(); "
             "assert value and decimal.Decimal(1) + 1 == 2 and fractions.Fraction(1, 2) * 2 == 1")
    result = _criterion_doing(tmp_path, doing, python)
    assert result["status"] == "passed", result
