"""tests/helpers/crossworker.py: a thing every worker of a parallel run asks for is made once, by the first that asks;
a failed make is reported to every worker and never made again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import crossworker
from tests.helpers.project import ROOT

# One "worker": a pytest-like factory whose base folder is <root>/popen-<name>, asking for the shared thing; making it
# takes a moment and counts itself in a file, so that two workers asking at once would both make it without the lock.
WORKER = """
import json, sys, time
from pathlib import Path
import pytest
from tests.helpers import crossworker

class Factory:
    def getbasetemp(self):
        return Path(sys.argv[1]) / sys.argv[2]

def make(folder):
    with open(Path(sys.argv[1]) / "makes.log", "a") as log:
        log.write(sys.argv[2] + "\\n")
    time.sleep(0.5)
    if sys.argv[3] == "fail":
        raise RuntimeError("the build broke")
    (folder / "thing").write_text("made")
    return {"by": sys.argv[2]}

try:
    folder, made = crossworker.once(Factory(), "thing", make)
    print(json.dumps({"made": made, "thing": (folder / "thing").read_text()}))
except pytest.fail.Exception as exc:
    print(json.dumps({"failed": str(exc)}))
"""


def _workers(tmp_path: Path, how: str) -> list[dict[str, object]]:
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), name, how], env=env,
                              stdout=subprocess.PIPE, text=True) for name in ("popen-gw0", "popen-gw1")]
    return [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]


def test_two_workers_asking_at_once_share_one_make(tmp_path: Path) -> None:
    answers = _workers(tmp_path, "ok")
    assert (tmp_path / "makes.log").read_text().count("\n") == 1  # made once, not once per worker
    makers = {answer["made"]["by"] for answer in answers}  # type: ignore[index]
    assert len(makers) == 1 and all(answer["thing"] == "made" for answer in answers), answers
    assert (tmp_path / "shared" / "thing" / crossworker.DONE).exists()


def test_a_failed_make_fails_every_worker_and_is_not_retried(tmp_path: Path) -> None:
    answers = _workers(tmp_path, "fail")
    assert (tmp_path / "makes.log").read_text().count("\n") == 1
    assert all("the shared thing could not be made: RuntimeError: the build broke" in str(answer["failed"])
               for answer in answers), answers


def test_outside_a_parallel_run_the_base_folder_is_the_shared_root(tmp_path_factory: pytest.TempPathFactory,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert crossworker.shared_root(tmp_path_factory) == tmp_path_factory.getbasetemp()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert crossworker.shared_root(tmp_path_factory) == tmp_path_factory.getbasetemp().parent


def test_a_process_is_kept_whole() -> None:
    proc = subprocess.CompletedProcess([Path("/bin/true"), "x"], 3, "out", "err")
    back = crossworker.process_from(json.loads(json.dumps(crossworker.process_record(proc))))
    assert (back.args, back.returncode, back.stdout, back.stderr) == (["/bin/true", "x"], 3, "out", "err")
