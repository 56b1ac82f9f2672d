"""Compiled extensions (issue 33) with a REAL torch extension: a small C++ op built here with
``torch.utils.cpp_extension`` into a wheel (once per module, twice: sound, and its op calling a c10 function libtorch
does not export), installed beside the real rebuilt env's torch, found from outside by its DT_NEEDED and judged by the
runner's ``extensions`` step with real libtorch: imported and smoke-checked; an ABI break named with its demangled
symbol; a smoke check disagreeing with its pure-PyTorch reference. Then through a whole ``reference --new``: the sound
wheel locked from its local find-links folder, the env rebuilt with it, ``passed`` with the extension and its smoke
check in the report and the smoke file in the reference's identity (an edit of it then refused by verify); the broken
one through ``verify --python`` of an env holding it stops at ``extensions``, layer
``extension-abi``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import extension_scan
from tests.helpers import tinyapp
from tests.helpers.extstep import run_step
from tests.helpers.project import copy_project, kd
from tests.helpers.reports import read_report, statuses

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")]

# An ATen op registered with torch's dispatcher when the module is imported (TORCH_LIBRARY, called as
# torch.ops.kdext.scaled_add), in a module of its own: without torch/extension.h's pybind11 and torch/all.h it
# compiles in a fifth of the CPU (~4 CPU-s, not ~23), and it still links libc10 and libtorch_cpu.
OPS = r"""
#include <ATen/core/Tensor.h>
#include <torch/library.h>
#include <Python.h>
at::Tensor scaled_add(const at::Tensor& a, const at::Tensor& b, double alpha) { return a.add(b, alpha); }
TORCH_LIBRARY(kdext, m) { m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor", &scaled_add); }
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
"""
# The same package and module, its op calling a c10 function libtorch does not export (beside one it does, so that
# the linker keeps libc10 as needed). Without torch's headers it compiles in seconds, not a minute.
BROKEN_OPS = r"""
#include <Python.h>
namespace c10 { struct Allocator; Allocator* GetCPUAllocator(); void kernodeck_not_exported(); }
static PyObject* scaled_add(PyObject*, PyObject*) {
  c10::kernodeck_not_exported();
  return PyLong_FromVoidPtr(c10::GetCPUAllocator());
}
static PyMethodDef methods[] = {{"scaled_add", scaled_add, METH_VARARGS, "broken"}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
"""
SETUP = """
import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(name="kdext-ops", version=os.environ["KDEXT_VERSION"], packages=["kdext"],
      ext_modules=[CppExtension("kdext._C", ["kdext/ops.cpp"])],
      cmdclass={"build_ext": BuildExtension})
"""
SMOKE = """
import torch


def smoke(ext, device):
    a = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3)
    b = torch.full((2, 3), 2.0, device=device)
    op = torch.ops.kdext.scaled_add  # registered by importing ext (kdext._C)
    return {"output": op(a, b, 0.5), "reference": a + ALPHA * b, "path": "compiled"}
"""
DECLARED = {"kdext": {"module": "kdext._C", "smoke": "checks/ext.py:smoke", "rtol": 1e-6, "atol": 1e-6,
                      "path": "compiled"}}


def _build(python: Path, work: Path, version: str, broken: bool) -> Path:
    """The wheel of kdext-ops, compiled against the env's torch by its own cpp_extension."""
    src = work / f"src-{version}"
    (src / "kdext").mkdir(parents=True)
    (src / "kdext" / "__init__.py").write_text("", encoding="utf-8")
    (src / "kdext" / "ops.cpp").write_text(BROKEN_OPS if broken else OPS, encoding="utf-8")
    (src / "setup.py").write_text(SETUP, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "PYTHONPATH"}
    env.update(KDEXT_VERSION=version, MAX_JOBS="2", PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1",
               PIP_CONFIG_FILE=os.devnull, PYTHONDONTWRITEBYTECODE="1")
    out = work / "wheels"
    proc = subprocess.run([str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out),
                           str(src)], cwd=src, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(out.glob(f"kdext_ops-{version}-*.whl"))


@pytest.fixture(scope="module")
def wheels(built_project: Path, module_tmp: Path) -> dict[str, Path]:
    python = next(built_project.glob(".venv-rebuild/*/current/bin/python"))
    return {"sound": _build(python, module_tmp, "1.0+pt213cpu", broken=False),
            "broken": _build(python, module_tmp, "1.0+pt25cu124", broken=True)}


def _env_with(wheel: Path, built_project: Path, root: Path) -> Path:
    """A venv seeing the rebuilt env's packages (a .pth) with the wheel installed in its own site-packages."""
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True)
    site = next((env / "lib").glob("python*/site-packages"))
    torch_site = next(built_project.glob(".venv-rebuild/*/current/lib/python*/site-packages"))
    (site / "rebuilt.pth").write_text(f"{torch_site.resolve()}\n", encoding="utf-8")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return env


def _project(root: Path, alpha: str) -> None:
    (root / "checks").mkdir(parents=True, exist_ok=True)
    (root / "checks" / "ext.py").write_text(SMOKE.replace("ALPHA", alpha), encoding="utf-8")


def test_a_real_extension_is_found_imported_and_smoke_checked(wheels: dict[str, Path], built_project: Path,
                                                               tmp_path: Path) -> None:
    env = _env_with(wheels["sound"], built_project, tmp_path)
    found = extension_scan.discover(env, cuobjdump="")
    (ext,) = found.extensions
    (obj,) = ext.objects
    assert ext.distribution == "kdext-ops" and obj.module == "kdext._C"
    assert {"libc10.so", "libtorch_cpu.so"} <= set(obj.links), obj.links  # what cpp_extension links (as needed)
    assert ext.built_for["torch"] == "2.13"
    _project(tmp_path, "0.5")
    result = run_step(env, tmp_path, DECLARED)
    assert result["status"] == "passed", result
    (record,) = result["details"]["extensions"]
    assert record["objects"][0]["imported"] is True and record["torch_matches"] is True
    assert result["details"]["smoke"]["kdext"]["max_abs"] == 0.0
    assert result["details"]["smoke"]["kdext"]["path"] == "compiled"

    # the negative control: its reference computed with another alpha disagrees, naming the extension
    _project(tmp_path, "0.25")
    result = run_step(env, tmp_path, DECLARED)
    assert result["status"] == "failed" and result["layer"] == "operator:kdext", result
    assert result["error"].startswith("extension kdext: smoke output differs from its pure-PyTorch reference")


def test_a_real_extension_calling_what_libtorch_does_not_export_is_an_abi_break(
        wheels: dict[str, Path], built_project: Path, tmp_path: Path) -> None:
    env = _env_with(wheels["broken"], built_project, tmp_path)
    result = run_step(env, tmp_path)
    assert result["status"] == "failed" and result["layer"] == "extension-abi", result
    error = result["error"]
    assert error.startswith("extension kdext-ops: _C.") and "undefined symbol" in error
    assert "c10::kernodeck_not_exported()" in error and "_ZN3c1022kernodeck_not_exportedEv" in error
    assert "built for torch 2.5 / CUDA 12.4 (version label +pt25cu124); this env runs torch 2.13" in error


def _declaring_project(root: Path, *, tiny: bool = False) -> Path:
    """A copy of the project declaring the extension's smoke check (and, ``tiny``, the tiny application in place of
    MiniLM: tests/helpers/tinyapp.py)."""
    project = copy_project(root / "project")
    if tiny:
        tinyapp.declare(project)
    _project(project, "0.5")
    with (project / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write('\n[tool.kernodeck.extensions.kdext]\nmodule = "kdext._C"\nsmoke = "checks/ext.py:smoke"\n'
                     'rtol = 1e-6\natol = 1e-6\npath = "compiled"\n')
    return project


def _locked(root: Path, wheel: Path) -> None:
    """The project's lock with the extension's wheel added (from its find-links folder), as `nox -s lock` writes a
    lock: the base layer names it, the header holds the inputs, the PEP 751 twin places every file."""
    from kernodeck._fs import sha256_file
    from kernodeck.lock import check, lockfile, write
    from kernodeck.lock import inputs as lock_inputs
    from kernodeck.lock.twin import known_files
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform
    from kernodeck.sources import Source

    project = load_project(root)
    plat = resolve_platform(project)
    with (root / project.requirements[0]).open("a", encoding="utf-8") as handle:
        handle.write("kdext-ops\n")
    committed = lock_inputs.lock_path(project, plat).read_text(encoding="utf-8").splitlines(keepends=True)
    body = "".join(line for line in committed if not line.startswith("#"))
    body += f"kdext-ops=={wheel.name.split('-')[1]} \\\n    --hash=sha256:{sha256_file(wheel)}\n"
    inputs = lock_inputs.compute_inputs(project, plat, "pip-tools")
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", plat.id), ("python", plat.python),
              ("variant", plat.variant.name),
              ("resolver", f"pip-tools {lock_inputs.resolver_version(project, 'pip-tools')}"),
              ("command", "written by tests/e2e/test_extensions_e2e.py"),
              ("packages", str(sum(1 for ln in body.splitlines() if ln[:1].isalnum() and "==" in ln))),
              *[("input", f"{k} {v}") for k, v in inputs.entries], ("inputs-digest", inputs.digest())]
    write.write_pair(project, plat, lockfile.render(header, body), [Source("find-links", str(wheel.parent))], True,
                       known=known_files(lock_inputs.pylock_path(project, plat)))
    assert check.check_lock(project, plat) == []


def test_a_reference_made_with_the_extension_describes_its_smoke_check(wheels: dict[str, Path], built_project: Path,
                                                                        tmp_path: Path) -> None:
    """The extension locked from a local find-links folder: reference --new rebuilds the env with it and passes, the
    extension and its smoke check in the report. The smoke check runs in the runner's process before the application
    (what it patches there reaches the application), so its file is part of the reference's identity: the new
    manifest fingerprints it, and an edit of it is a code change verify names before anything is built. The
    application is the tiny one: the extension, its smoke check and the identity are Kernodeck's, the same for any
    application, and MiniLM's model would only add its load and its runs to the reference's."""
    project = _declaring_project(tmp_path, tiny=True)
    _locked(project, wheels["sound"])
    out = tmp_path / "ref"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["UV_FIND_LINKS"] = str(wheels["sound"].parent)  # beside this machine's sources: the extension's folder
    proc = kd(project, "reference", "--new", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert report["status"] == "passed", report["verdict"]
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    ext = steps["extensions"]
    assert ext["status"] == "passed" and ext["details"]["extensions"][0]["distribution"] == "kdext-ops"
    smoke_sha256 = sha256_file(project / "checks" / "ext.py")
    assert ext["details"]["smoke"]["kdext"]["max_abs"] == 0.0
    assert ext["details"]["smoke"]["kdext"]["smoke_sha256"] == smoke_sha256
    assert next(c for c in report["claims"] if c["id"] == "extensions")["established"]  # type: ignore[union-attr]
    assert "kdext-ops 1.0+pt213cpu: 1 module(s) imported, built for torch 2.13; smoke kdext" in (
        out / "report.md").read_text()
    chain = json.loads((out / "system.json").read_text())["build_chain"]
    assert {"gcc", "g++", "nvcc", "ninja", "CUDA_HOME", "ROCM_PATH", "TORCH_CUDA_ARCH_LIST"} <= set(chain)
    manifest = tomllib.loads((project / "dossier" / "reference" / "manifest.toml").read_text(encoding="utf-8"))
    assert manifest["application"]["code"]["checks/ext.py"] == smoke_sha256

    # the negative control: the smoke file edited (another path named), verify refuses it as a code change
    (project / "checks" / "ext.py").write_text(SMOKE.replace("ALPHA", "0.5") + "# edited\n", encoding="utf-8")
    proc = kd(project, "verify", "--out", str(tmp_path / "run"), env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "code differs from the reference's fingerprint: checks/ext.py" in proc.stderr
    report = read_report(tmp_path / "run")
    assert report["first_failure"] == "reference-manifest", report["verdict"]
    failed = next(s for s in report["steps"] if s["name"] == "reference-manifest")  # type: ignore[union-attr]
    assert failed["details"]["changed_code"] == ["checks/ext.py"], failed


def test_verify_stops_at_extensions_on_an_abi_break(wheels: dict[str, Path], built_project: Path,
                                                     tmp_path: Path) -> None:
    env = _env_with(wheels["broken"], built_project, tmp_path)
    project = _declaring_project(tmp_path)
    # the fake env borrows the built env's site-packages through a .pth: its libraries are declared, as a project
    # declares libraries taken from outside its env (inenv/libraries.py fails a step on undeclared ones)
    torch_site = next(built_project.glob(".venv-rebuild/*/current/lib/python*/site-packages")).resolve()
    libraries = sorted(str(so.resolve()) for so in torch_site.rglob("*.so*") if so.is_file())
    with (project / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.kernodeck.environment]\nlibraries = [" + ", ".join(f'"{x}"' for x in libraries) + "]\n")
    out = tmp_path / "run"
    # the declared smoke check's file is part of the reference's identity, which the committed reference does not
    # describe: --allow-code-change runs the checks anyway (never a pass), so the run reaches the extensions step
    proc = kd(project, "verify", "--python", str(env / "bin" / "python"), "--allow-code-change", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    assert report["first_failure"] == "extensions" and statuses(report)["application"] == "not-run"
    failed = next(s for s in report["steps"] if s["name"] == "extensions")  # type: ignore[union-attr]
    assert failed["layer"] == "extension-abi" and "c10::kernodeck_not_exported()" in failed["error"]
    assert "**Likely cause**: the extension-abi layer" in (out / "report.md").read_text()
