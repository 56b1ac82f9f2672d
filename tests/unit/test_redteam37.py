"""Red-team pass 37 (11aeb3f: pass 36's fixes attacked by class): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stands, beside controls that pass today (notes: /work/notes/redteam37.md).

TWIN2 (the twin's file names are taken from the twin itself; FALSE PASS of the one lock check, TWIN1's class): the
twin is held to what Kernodeck's writer makes for the lock, "each file's URL, size and upload time taken from the
twin" and placed by its sha256, the file's ``name`` too. So the pairing of a file's name (what a PEP 751 installer
selects by: its wheel tags) with its bytes (URL and sha256) is never held: numpy's cp311 manylinux entry given the
URL, size, upload time and sha256 of the cp312 wheel (and the cp312 entry the cp311 one's) keeps the same names, the
same set of hashes, the same order, and ``nox -s lock -- --check`` says ``ok`` (real session, rc 0); rebuild and
verify's lock-check pass it too. ``Pylock.select()`` on linux x86_64 CPython 3.11 then takes the entry named
``numpy-2.4.6-cp311-…`` whose URL is the cp312 wheel: an installer of the twin installs another Python's binary
(whose hash the lock allows, so its hash check passes). Two wheels both fit for the platform (regex ships two
cp311 x86_64 wheels) swap silently. CONTROL1: a hash of another package put in numpy's entry is refused.

FF4 (FF3's class: the criterion's answer leaves its window as JSON with ``default=_scalar``, numpy scalars as their
values and anything else as its text): a criterion answering ``{"passed": torch.tensor(0.95) >= 0.9}`` (a 0-d torch
bool, where the criterion computes in torch) fails "it returned 'passed' of type str": the type named is the one
Kernodeck's own fallback made (``str(tensor)``), not the ``torch.Tensor`` the user returned. CONTROL2: a numpy bool
passes.

OUT1 (the --out rule's single-file door; FALSE claim "Kernodeck never loses a file it did not write", with the user's
file lost): ``export`` checks ``--out/x`` (``outdir.check_file(args.out / "x")``, a name it never writes), then writes
``Dockerfile``, ``Dockerfile.dockerignore`` or ``kernodeck.def``, and ``kernodeck-tools.txt`` over whatever is there,
with no sidecar record. ``nox -s export -- --out runs/mine`` over the user's ``runs/mine/Dockerfile``: rc 0, replaced;
``--format apptainer --out DIR`` (DIR may be outside the project) likewise over ``DIR/kernodeck.def``. Into a finished
dossier (``--out runs/base``) it adds three files that the next ``verify -- --out runs/base`` calls "entries Kernodeck
did not write". CONTROL3: check_file given the real path refuses the user's file.

OUT2 (same door, FALSE FAIL): ``matrix --format gitlab|slurm --out FILE`` writes FILE without its record (only the
GitHub line gets one), so the same command run again is refused: "a file Kernodeck did not write (no
.FILE.kernodeck-file record beside it)", TIP ``nox -s matrix -- --out FILE`` (its --format dropped). CONTROL4: the
GitHub matrix replaces its own file.

CAL2 (CAL1's class: the declared variation is "torch's own choice, not the caller's leftovers"): start.NUMERICS_PREFIXES
is a list of prefixes to drop; kernel-choosing variables outside it reach every variation and are not shown in
calibration.md: ``TORCH_COMPILE_DISABLE`` (torch.compile runs eager: a compiled gelu/layer_norm/softmax moves by 1.5e-7
against eager in the rebuilt env), ``PYTORCH_JIT``, ``PYTORCH_TUNABLEOP_ENABLED`` (tuned GEMMs on GPUs), ``NCCL_ALGO``.
CONTROL5: a caller's MKL_CBWR is dropped and shown.

MSG2 (MSG1's class): ``$KERNODECK_DEADLINE_SCALE=nan`` under ``reference`` or ``calibrate``: "TIP: nox -s verify --
--deadline-scale 2" (another session, and the variable stays set; deadlines.parse_scale's fixed TIP). CONTROL6: the
variable is named.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from kernodeck import outdir
from kernodeck.env import start
from kernodeck.errors import UnsafeOut
from kernodeck.lock import check
from kernodeck.measure import variations
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.builtenv import env_python
from tests.helpers.closedworld import _closed_project, _run, _with_criterion
from tests.helpers.project import ROOT
from tests.helpers.variationenv import variation_env

PLATFORM = "cp311-linux_x86_64-cpu"
PLAT = parse_platform_id(load_project(ROOT), PLATFORM)
CP311 = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
CP312 = "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
REGEX = "regex-2026.11.19-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


def _bytes_of(text: str, name: str) -> str:
    """The part of a file entry that says which bytes it is (url, upload time, size, hashes), by the file's name."""
    found = re.search(r'\{name = "' + re.escape(name) + r'", (url = .*?\}\})', text)
    assert found is not None, name
    return found.group(1)


def _twin(tmp_path: Path, edit: str) -> tuple[Path, Path]:
    """The committed lock and its twin, copied, the twin edited as ``edit`` says."""
    target = tmp_path / f"{PLATFORM}.txt"
    twin = tmp_path / f"pylock.{PLATFORM}.toml"
    shutil.copy2(ROOT / "lockfiles" / target.name, target)
    original = (ROOT / "lockfiles" / twin.name).read_text(encoding="utf-8")
    mine, other = _bytes_of(original, CP311), _bytes_of(original, CP312 if edit == "swapped" else REGEX)
    if edit == "swapped":  # the two entries keep their names and places, each given the other's bytes
        text = original.replace(mine, "\0").replace(other, mine).replace("\0", other)
    else:  # control: numpy's cp311 entry given regex's bytes (a hash the lock does not allow numpy)
        text = original.replace(mine, other, 1)
    assert text != original, edit
    twin.write_text(text, encoding="utf-8")
    return target, twin


def _taken(twin: Path) -> tuple[str, str]:
    """The numpy file a PEP 751 installer takes from the twin on this machine (linux x86_64, CPython 3.11): its name
    and its URL."""
    data = Pylock.from_dict(tomllib.loads(twin.read_text(encoding="utf-8")))
    ((name, url),) = [(str(f.name), str(f.url)) for package, f in data.select() if package.name == "numpy"]
    return name, url


def test_twin2_premise_the_installer_takes_the_cp312_bytes_under_the_cp311_name(tmp_path: Path) -> None:
    _, twin = _twin(tmp_path, "swapped")
    name, url = _taken(twin)
    assert name == CP311 and url.endswith("/" + CP312), (name, url)


def test_twin2_a_file_named_for_other_bytes_is_refused(tmp_path: Path) -> None:
    """Fixed: a file's name is its URL's last segment (the writer takes both from the index)."""
    target, twin = _twin(tmp_path, "swapped")
    found = check.twin_disagreements(target, twin, PLAT)
    assert any(f"the file {CP311} in " in line and f"whose file is {CP312}" in line for line in found), found


def test_control1_a_hash_of_another_package_in_numpys_entry_is_refused(tmp_path: Path) -> None:
    target, twin = _twin(tmp_path, "foreign")
    found = check.twin_disagreements(target, twin, PLAT)
    assert any("other hashes" in line for line in found), found


# --- FF4 -------------------------------------------------------------------------------------------------------------


def _criterion_returning(tmp_path: Path, built: Path, answer: str) -> dict[str, object]:
    """The criterion step's answer in a real env (the suite's one rebuilt env: built_project), the criterion
    returning ``answer``."""
    config = _with_criterion(_closed_project(tmp_path, code=["src/mypkg/**/*.py"]), f"return {answer}",
                             imports="os, sys, numpy as np, torch", code=["src/mypkg/**/*.py"])
    return _run(tmp_path, config, python=env_python(built))


def test_ff4_a_torch_bool_passed_is_taken_or_named_as_a_tensor(tmp_path: Path, built_project: Path) -> None:
    """Fixed: any 0-d value with ``item()`` (a torch tensor, a numpy scalar) leaves the window as its Python value."""
    answer = "{'passed': torch.tensor(0.95) >= 0.9, 'summary': 'accuracy 0.95'}"
    result = _criterion_returning(tmp_path, built_project, answer)
    assert result["status"] == "passed", result


def test_ff4_an_array_of_bools_is_named_as_what_it_was(tmp_path: Path, built_project: Path) -> None:
    """The control: a tensor of several bools is no bool; the message shows its text, not only 'str'."""
    answer = "{'passed': torch.tensor([0.95, 0.5]) >= 0.9, 'summary': 's'}"
    result = _criterion_returning(tmp_path, built_project, answer)
    assert result["status"] == "failed" and "tensor([ True, False])" in str(result["error"]), result


def test_control2_a_numpy_bool_passed_is_taken(tmp_path: Path, built_project: Path) -> None:
    answer = "{'passed': np.float32(0.95) >= 0.9, 'summary': 'accuracy 0.95'}"
    result = _criterion_returning(tmp_path, built_project, answer)
    assert result["status"] == "passed", result


# --- OUT1 ------------------------------------------------------------------------------------------------------------


def _export(out: Path) -> subprocess.CompletedProcess[str]:
    """``nox -s export -- --format apptainer --out OUT`` as the session runs it (apptainer: --out may be outside)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kernodeck", "export", "--format", "apptainer", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", ["kernodeck.def", "kernodeck-tools.txt"])
def test_out1_export_keeps_a_file_it_did_not_write(tmp_path: Path, name: str) -> None:
    """Fixed: each file export writes is checked first (outdir.check_file) and written with its record."""
    mine = tmp_path / name
    mine.write_text("my own\n", encoding="utf-8")
    proc = _export(tmp_path)
    assert proc.returncode == 2 and mine.read_text(encoding="utf-8") == "my own\n", proc.stdout + proc.stderr
    assert f"--out {mine} is a file Kernodeck did not write" in proc.stderr and "nox -s export" in proc.stderr


def test_out1_control_export_replaces_the_files_it_wrote(tmp_path: Path) -> None:
    for _ in range(2):  # the same command run again: its own files, recorded, replaced
        proc = _export(tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".kernodeck.def.kernodeck-file").is_file()


def test_control3_check_file_refuses_the_users_file_at_the_path_export_writes(tmp_path: Path) -> None:
    mine = tmp_path / "kernodeck.def"
    mine.write_text("Bootstrap: docker  # my own definition\n", encoding="utf-8")
    with pytest.raises(UnsafeOut):
        outdir.check_file(mine, what="the container file", tip="t", root=ROOT, allowed=(ROOT / "runs",))


def _matrix_twice(tmp_path: Path, fmt: str) -> None:
    """``nox -s matrix -- --format FMT --out runs/m`` run twice, the project's runs/ in ``tmp_path``."""
    from kernodeck.ci import engines, matrix

    project = dataclasses.replace(load_project(ROOT), runs=tmp_path)
    built = matrix.build(project, hosted_only=False, locked_only=False, runners=None)
    for _ in range(2):
        engines.emit(project, built, engines.Format(fmt), tmp_path / "m")


@pytest.mark.parametrize("fmt", ["gitlab", "slurm"])
def test_out2_the_matrix_replaces_the_file_it_wrote(tmp_path: Path, fmt: str) -> None:
    """Fixed: every engine's file is written with its record."""
    _matrix_twice(tmp_path, fmt)


def test_control4_the_github_matrix_replaces_the_file_it_wrote(tmp_path: Path) -> None:
    _matrix_twice(tmp_path, "github")


# --- CAL2 ------------------------------------------------------------------------------------------------------------

# Each picks the kernels a model runs (torch.compile's inductor code or eager, TorchScript's fuser or eager, tuned GEMM
# algorithms, NCCL's reduction algorithm): measured here, TORCH_COMPILE_DISABLE=1 moves a compiled
# gelu(x @ w) -> layer_norm -> softmax on 512x384 by 1.5e-7 (compiled against eager, in the rebuilt env).
KEPT = [("TORCH_COMPILE_DISABLE", "1"), ("PYTORCH_JIT", "0"), ("PYTORCH_TUNABLEOP_ENABLED", "1"), ("NCCL_ALGO", "Tree")]


@pytest.mark.parametrize("name,value", KEPT)
def test_cal2_the_declared_run_is_not_the_callers_kernel_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                name: str, value: str) -> None:
    """Fixed: a variation keeps of the caller's recorded variables only what a run needs (start.RUN_NEEDS); the rest
    is left out and shown."""
    env = variation_env(tmp_path, monkeypatch, {name: value})
    assert name not in env and variations.callers_numerics({}).get(name) == value, (name, env.get(name))
    assert name.startswith(start.RECORDED_PREFIXES)  # verify records it


@pytest.mark.parametrize("name,value", [("LD_LIBRARY_PATH", "/opt/lib"), ("CUDA_VISIBLE_DEVICES", "0"),
                                        ("HF_HOME", "/data/hf"), ("LC_ALL", "C.UTF-8"), ("TORCH_COMPILE_DISABLE", "1")])
def test_cal2_control_what_a_run_needs_and_what_is_declared_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 name: str, value: str) -> None:
    declared = [name] if name == "TORCH_COMPILE_DISABLE" else []  # declared: the application's input
    env = variation_env(tmp_path, monkeypatch, {name: value}, declared=declared)
    assert env.get(name) == value and name not in variations.callers_numerics({"variables": declared})


def test_control5_a_callers_mkl_cbwr_is_dropped_and_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = variation_env(tmp_path, monkeypatch, {"MKL_CBWR": "COMPATIBLE"})
    assert "MKL_CBWR" not in env and variations.callers_numerics({}).get("MKL_CBWR") == "COMPATIBLE"


# --- MSG2 ------------------------------------------------------------------------------------------------------------


def _session(*argv: str, scale: str) -> str:
    """``python -m kernodeck ARGV`` (the session's command) with ``$KERNODECK_DEADLINE_SCALE`` set: its refusal."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNODECK_DEADLINE_SCALE": scale}
    proc = subprocess.run([sys.executable, "-m", "kernodeck", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    return proc.stderr


def test_msg2_a_bad_deadline_variable_tips_the_session_run() -> None:
    """Fixed: the variable is refused for the command being run, its TIP that command's."""
    said = _session("reference", "--new", scale="nan")
    tip = next(line for line in said.splitlines() if line.startswith("TIP:"))
    assert "nox -s reference" in tip and "KERNODECK_DEADLINE_SCALE" in tip, said


def test_control6_the_bad_variable_is_named() -> None:
    assert "$KERNODECK_DEADLINE_SCALE must be a number > 0" in _session("reference", "--new", scale="nan")


@pytest.mark.parametrize("mode", ["reference", "verify"])
def test_msg2_the_preload_refusal_tips_the_session_run(tmp_path: Path, mode: str) -> None:
    """MSG2's by-reading half: the LD_PRELOAD refusal reached by a reference run tips reference, a verify's verify."""
    from kernodeck.verify.pipeline import Run, StepFailed
    from kernodeck.verify.steps import in_env

    project = load_project(ROOT)
    run = Run(project, parse_platform_id(project, "cp311-linux_x86_64-cpu"), tmp_path)
    run.meta.mode, run.meta.variables = mode, {"LD_PRELOAD": "/tmp/evil.so"}
    with pytest.raises(StepFailed) as refused:
        in_env._refuse_preload(run, ("settings",), ["/tmp/evil.so"])
    assert refused.value.error.tip is not None and refused.value.error.tip.endswith(f"then: nox -s {mode}")
