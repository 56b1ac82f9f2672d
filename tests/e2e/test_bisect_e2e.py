"""upgrade and bisect end to end, with a culprit known in advance.

A loopback PEP 503 index (http.server on 127.0.0.1) serves small pure-Python wheels built here: ``kdfixture-scale``
1.0 and 2.0 (2.0 multiplies what it returns by 1.25), and ``kdfixture-alpha`` / ``-beta`` / ``-gamma`` 1.0 and 2.0,
whose 2.0 change nothing the application computes (alpha 2.0 requires beta >= 2.0: the two must move together). A
small application (numpy, beside this machine's torch, which every Kernodeck env runs its settings with) uses all
four. The project locks with only the 1.0 wheels published, makes its reference, then the 2.0 wheels are published:
``upgrade`` relocks, shows the four changes and fails against the reference; ``bisect`` names kdfixture-scale within
its bound (``ceil(log2 n) + 6`` trials, the repeats that confirm it included); moving only the three harmless
packages reports no culprit.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from kernodeck.lock import lockfile
from kernodeck.upgrade import bisect as bisecting
from tests.helpers.project import ROOT
from tests.helpers.tinylock import write_wheel

pytestmark = pytest.mark.slow

PLATFORM = "cp311-linux_x86_64-cpu"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackIndex:
    """A PEP 503 simple index on 127.0.0.1 serving the wheels :meth:`publish` was given."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "files").mkdir(parents=True)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
        self.server.timeout = 5
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def publish(self, *wheels: Path) -> None:
        for wheel in wheels:
            shutil.copy2(wheel, self.root / "files" / wheel.name)
        projects: dict[str, list[Path]] = {}
        for wheel in sorted((self.root / "files").glob("*.whl")):
            projects.setdefault(wheel.name.split("-")[0].replace("_", "-"), []).append(wheel)
        for name, files in projects.items():
            links = "".join(
                f'<a href="../../files/{html.escape(f.name)}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
                f"{html.escape(f.name)}</a>\n" for f in files)
            page = self.root / "simple" / name / "index.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n", encoding="utf-8")
        top = "".join(f'<a href="{n}/">{n}</a>\n' for n in sorted(projects))
        (self.root / "simple" / "index.html").write_text(f"<html><body>\n{top}</body></html>\n", encoding="utf-8")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


SHIFT = "SHIFT = 0.0\n"
SCALE = "FACTOR = {factor}\n\n\ndef scale(x):\n    return x * FACTOR\n"

APP = '''"""The bisect fixture's application: four tiny packages' numbers on a few inputs."""


def run(app):
    import kdfixture_alpha
    import kdfixture_beta
    import kdfixture_gamma
    import kdfixture_scale
    import numpy as np

    xs = np.array([[float(r["x"]), float(r["x"]) ** 2] for r in app.records], dtype=np.float64)
    values = kdfixture_scale.scale(xs) + kdfixture_alpha.SHIFT + kdfixture_beta.SHIFT + kdfixture_gamma.SHIFT
    app.write("values", values.astype(np.float32), [r["id"] for r in app.records])


def criterion(outputs, ids, records, params):
    import numpy as np

    # the values grow with x (any positive scale keeps that): rows permuted against their ids, or a constant, do not
    values = outputs["values"][np.argsort([float(r["x"]) for r in records]), 0]
    rising = bool(np.isfinite(values).all() and (np.diff(values) > 0).all())
    return {"passed": rising, "summary": "values rise with x" if rising else "values do not rise with x"}
'''


def fixture_project(root: Path, index_url: str) -> Path:
    """examples/digits' declarations with the fixture's application, inputs and index (the variant's)."""
    example = ROOT / "examples" / "digits"
    root.mkdir(parents=True)
    doc = tomlkit.parse((example / "pyproject.toml").read_text(encoding="utf-8"))
    tool: Any = doc["tool"]["kernodeck"]  # type: ignore[index]
    tool["variants"]["cpu"]["index"] = index_url
    app = tool["application"]
    app["params"] = {}
    app.pop("resume", None)  # digits' own training resume: this fixture's application does not train
    del app["outputs"]
    values = tomlkit.table()
    values.update({"kind": "allclose", "dtype": "float32", "rtol": 1e-6, "atol": 1e-6,
                   "justification": "The fixture's numbers are exact products of small floats: any package that "
                   "changes them by more than float32 rounding is the change under test."})
    outputs = tomlkit.table()
    outputs["values"] = values
    app["outputs"] = outputs
    (root / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    shutil.copy2(example / "noxfile.py", root / "noxfile.py")
    (root / "requirements").mkdir()
    (root / "requirements" / "base.in").write_text(
        "numpy\npip\nkdfixture-alpha\nkdfixture-beta\nkdfixture-gamma\nkdfixture-scale\n", encoding="utf-8")
    shutil.copy2(example / "requirements" / "torch-cpu.in", root / "requirements" / "torch-cpu.in")
    (root / "checks").mkdir()
    (root / "checks" / "app.py").write_text(APP, encoding="utf-8")
    (root / "data").mkdir()
    (root / "data" / "sample.jsonl").write_text(
        "".join(json.dumps({"id": f"r{i}", "x": 0.5 + i}) + "\n" for i in range(6)), encoding="utf-8")
    return root


def kd(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m kernodeck ARGS`` in the fixture project, Kernodeck from this checkout, uv beside this python."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run([sys.executable, "-m", "kernodeck", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=1200, check=False)


def _ok(proc: Any, what: str) -> None:
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def upgraded(module_tmp: Path) -> Iterator[tuple[Path, Any, Any]]:
    """The fixture project after its reference (1.0 wheels) and an upgrade (2.0 wheels published)."""
    work = module_tmp
    wheels = work / "wheels"
    index = LoopbackIndex(work / "index")
    try:
        for version in ("1.0", "2.0"):
            write_wheel(wheels / version, "kdfixture-alpha", version,
                        ("kdfixture-beta>=2.0",) if version == "2.0" else (), module=SHIFT)
            for name in ("kdfixture-beta", "kdfixture-gamma"):
                write_wheel(wheels / version, name, version, module=SHIFT)
            write_wheel(wheels / version, "kdfixture-scale", version,
                        module=SCALE.format(factor="1.0" if version == "1.0" else "1.25"))
        index.publish(*sorted((wheels / "1.0").glob("*.whl")))
        project = fixture_project(work / "project", index.url)
        _ok(kd(project, "lock", "--resolver", "uv"), "lock")
        _ok(kd(project, "reference"), "reference")
        index.publish(*sorted((wheels / "2.0").glob("*.whl")))
        upgrade = kd(project, "upgrade")
        yield project, upgrade, index
    finally:
        index.close()


@pytest.mark.reliability(91, "upgrade a project whose new pins include one package that changes its numbers "
                         "(kdfixture-scale 2.0, x1.25) beside three that change nothing",
                         "the lock diff names the four version changes; the drift table says out of tolerance; the "
                         "old lock is kept under runs/; exit 1 with the bisect command as the next step")
def test_upgrade_shows_the_diff_and_the_drift(upgraded: tuple[Path, Any, Any]) -> None:
    project, proc, _ = upgraded
    assert proc.returncode == 1, proc.stderr[-4000:]
    out = proc.stdout
    for name in ("kdfixture-alpha", "kdfixture-beta", "kdfixture-gamma", "kdfixture-scale"):
        assert f"| {name} | upgraded | 1.0 → 2.0 |" in out
    assert "4 upgraded" in out
    assert "| values | allclose |" in out and "**NO**" in out
    assert "OUT OF TOLERANCE" in out and "nox -s bisect -- --platform" in out
    folder = next((project / "runs").glob("upgrade-*"))
    old = lockfile.read(folder / "old" / f"{PLATFORM}.txt").versions()
    new = lockfile.read(project / "lockfiles" / f"{PLATFORM}.txt").versions()
    assert old["kdfixture-scale"] == "1.0" and new["kdfixture-scale"] == "2.0"
    assert {k: v for k, v in old.items() if not k.startswith("kdfixture")} == {
        k: v for k, v in new.items() if not k.startswith("kdfixture")}
    summary = json.loads((folder / "upgrade.json").read_text(encoding="utf-8"))
    assert summary["holds"] is False and summary["outputs"][0]["max_abs"] > 1e-3


@pytest.mark.reliability(92, "bisect the upgrade: old lock good, new lock bad, 4 changed packages in 3 groups "
                         "(alpha 2.0 requires beta 2.0), kdfixture-scale the culprit",
                         "kdfixture-scale named alone with its numbers, within ceil(log2 n)+6 trials, the 3 that "
                         "decide repeated alike, every env tried listed; alpha and beta moved together")
def test_bisect_names_the_known_culprit_within_the_bound(upgraded: tuple[Path, Any, Any]) -> None:
    project, _, _ = upgraded
    old = next((project / "runs").glob("upgrade-*")) / "old" / f"{PLATFORM}.txt"
    proc = kd(project, "bisect", "--good", str(old), "--bad", f"lockfiles/{PLATFORM}.txt")
    _ok(proc, "bisect")
    assert "**Culprit: kdfixture-scale 1.0 → 2.0** (alone, on the old lock, it leaves the tolerance)" in proc.stdout
    assert "kdfixture-alpha + kdfixture-beta" in proc.stderr or "kdfixture-alpha 1.0 → 2.0 + kdfixture-beta" in \
        proc.stderr
    result = json.loads(next((project / "runs").glob("bisect-*/bisect.json")).read_text(encoding="utf-8"))
    assert result["culprit"] == [["kdfixture-scale"]] and result["alone"] is True
    assert ["kdfixture-alpha", "kdfixture-beta"] in result["groups"]
    n = len(result["groups"])
    assert n == 3 and result["envs"] <= result["bound"] == math.ceil(math.log2(n)) + 6, result["trials"]
    assert result["trials"][0]["rebuilt"] is False  # the new lock's env is the one upgrade left current
    # ... run twice, neither rebuilt; a later repeat runs in its trial's kept env (same lock, checked against it)
    again = [t for t in result["trials"][2:] if t["repeat_of"]]
    assert again and all(t["env_of"] == t["repeat_of"] and not t["rebuilt"] for t in again), result["trials"]
    assert result["rebuilds"] == result["envs"] - 2 - len(again)
    # the trials that decide, each run once more and alike: the new lock's env, the culprit alone, the others
    repeated = {tuple(sorted(r["moved"])): r["outcomes"] for r in result["repeated"]}
    assert len(repeated) == 3 and repeated[("kdfixture-scale",)] == ["out of tolerance"] * 2, repeated
    assert repeated[("kdfixture-alpha", "kdfixture-beta", "kdfixture-gamma")] == ["within tolerance"] * 2
    assert result["clash"] is None and "Repeated to confirm the trials that decide (3 extra)" in proc.stdout
    assert "| values | allclose |" in proc.stdout  # the culprit's numbers against the reference
    for line in ("bisect [1/", "bisect [2/"):
        assert line in proc.stderr  # progress


@pytest.mark.reliability(93, "negative control: bisect from the old lock to one that moves only the three packages "
                         "that change no number", "no culprit: all within tolerance, after one env run twice")
def test_bisect_without_a_culprit_says_so(upgraded: tuple[Path, Any, Any], tmp_path: Path) -> None:
    project, _, _ = upgraded
    old_path = next((project / "runs").glob("upgrade-*")) / "old" / f"{PLATFORM}.txt"
    good, bad = lockfile.read(old_path), lockfile.read(project / "lockfiles" / f"{PLATFORM}.txt")
    harmless = project / "runs" / "harmless.txt"
    harmless.write_text(bisecting.intermediate_lock(good, bad, {"kdfixture-alpha", "kdfixture-beta",
                                                                "kdfixture-gamma"}, "harmless only"),
                        encoding="utf-8")
    proc = kd(project, "bisect", "--good", str(old_path), "--bad", str(harmless))
    _ok(proc, "bisect")
    assert "No culprit: all within tolerance" in proc.stdout
    result = json.loads(sorted((project / "runs").glob("bisect-*/bisect.json"))[-1].read_text(encoding="utf-8"))
    assert result["verdict"] == "no culprit" and len(result["trials"]) == 2
    assert result["trials"][0]["rebuilt"] and result["trials"][1]["env_of"] == 1  # the repeat in try-01's env
    assert result["repeated"] == [{"trial": 1, "moved": result["trials"][0]["moved"], "repeats": [2],
                                   "outcomes": ["within tolerance"] * 2}]
