"""kernodeck/inenv/paths.py: what the closed world trusts by where a file is. An env kept in a tmpfs under /dev
(/dev/shm) is the env; another ordinary file there is not trusted, a device is the system's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tinylock import fresh_venv

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"

_PROBE = """
import json, runpy, sys
runpy.run_path(sys.argv[1])
from kernodeck_inenv import paths
print(json.dumps({name: paths.trusted(path) for name, path in zip(("env", "other", "device"), sys.argv[2:])}))
"""


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[Path]:
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    folder = Path("/dev/shm") / f"kd-paths-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_env_in_dev_shm_is_trusted_and_another_file_there_is_not(shm: Path) -> None:
    python = fresh_venv(shm / "env")
    site = next((shm / "env").glob("lib/python*/site-packages"))
    (site / "inenv_mod.py").write_text("VALUE = 1\n", encoding="utf-8")
    (shm / "other.py").write_text("VALUE = 2\n", encoding="utf-8")
    done = subprocess.run([str(python), "-s", "-P", "-c", _PROBE, str(INENV / "_package.py"),
                           str(site / "inenv_mod.py"), str(shm / "other.py"), "/dev/null"],
                          capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-800:]
    # before: every ordinary file under /dev was refused, the env's own files in /dev/shm included
    assert json.loads(done.stdout) == {"env": True, "other": False, "device": True}
