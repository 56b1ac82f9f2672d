"""Red-team pass 36 (948fff9: the verdict outside the application resume): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stands, beside controls that pass today (notes: /work/notes/redteam36.md).

TWIN1 (the PEP 751 twin checked by name, version and hashes only; FALSE PASS of "one lock check"): ``twin.compare``
keeps one entry per package name and compares its version and its set of sha256. What a PEP 751 installer acts on
besides is not compared: a ``marker`` on a package (torch's entry marked ``sys_platform == 'win32'``: on linux the
installer skips torch), or a second entry of the same name placed before the real one (the dict keeps the last, so
the other is never seen; with the real one marked off, the installer takes the stranger). ``nox -s lock -- --check``
says ``ok`` for the marked twin, so rebuild and verify's lock-check pass it; ``Pylock.select()`` then leaves torch out.
CONTROL1: one hash changed in the twin is refused.

CAL1 (calibrate's CPU axis does not vary the CPU code path of torch's BLAS; WRONG CLAIM): the ``isa-*`` variations
"stand for another CPU model" but set only ``ATEN_CPU_CAPABILITY``, which picks ATen's own vector kernels. A float32
``linear``/``matmul`` on x86 runs in MKL, which picks its code path from the CPU itself (``MKL_ENABLE_INSTRUCTIONS``),
and oneDNN likewise (``ONEDNN_MAX_CPU_ISA``). Measured in the rebuilt env on this AVX-512 machine: a 512x384 by
384x1536 ``linear`` moves by 7.6e-5 with ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (what an AVX2 CPU runs) and by 0.0 with
``ATEN_CPU_CAPABILITY=avx2``, so the noise calibrate calls "another CPU" leaves out the variation of the bulk of a
model's compute. Also: the ``declared`` run is "torch's own choice, never the caller's leftovers", but only
``ATEN_CPU_CAPABILITY``, ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` are dropped; a caller's ``MKL_CBWR`` (which moves
the same linear by 8.8e-5) or ``MKL_ENABLE_INSTRUCTIONS`` reaches every variation, the declared one included.
CONTROL2: the isa variation sets ATEN_CPU_CAPABILITY, and the declared run drops a caller's ATEN_CPU_CAPABILITY.

FF1 (a failed reference blocks the next one; FALSE FAIL, wrong TIP): ``outdir.mark`` lists the files of a dossier,
not its folders, and ``outdir.foreign`` calls a folder that holds no listed file "not written by Kernodeck". A run
that fails at the application step leaves the ``outputs/`` folder it made empty. ``nox -s reference`` always writes
``runs/reference-<platform>``, so after a reference that failed at application (the entry raised), the next
``nox -s reference -- --new`` (the code fixed) is refused: "--out .../runs/reference-cp311-linux_x86_64-cpu holds 1
entry Kernodeck did not write, or changed since it wrote them: outputs/", with the TIP ``nox -s verify -- --out
runs/NAME``: an --out the user never gave, and another session. The same for ``verify -- --out DIR`` rerun into the
folder of a failed verify. CONTROL3: a file the user dropped into a marked dossier is still named.

FF2 (a NaN param never equals itself; FALSE FAIL that loops): TOML has ``nan`` and params take any value
(``params = { fill-value = nan }``, a missing-value fill). ``nox -s reference -- --new`` accepts it and records it;
then every ``nox -s verify`` fails at ``reference-manifest``: "the reference's contract is not the one declared ...
application.params: {..., 'eps': nan} -> declared {..., 'eps': nan}", TIP ``nox -s reference -- --new``, which makes
the same reference again: ``manifest.table_differences`` compares with ``!=``. The same equality lets another
declaration pass for the recorded one (WRONG CLAIM "a verify whose manifest differs from pyproject is refused"):
``true`` for ``1``, ``1.0`` for ``1``, ``-0.0`` for ``0.0`` (the entry gets the declared value, of another type or
sign, while the reference was made with the recorded one). CONTROL4: a param changed is named.

POWER1 (a tolerance's power is judged at infinity; WRONG CLAIM "each declared tolerance is shown able to fail"):
only a tolerance no finite move exceeds is "unable to fail". ``allclose`` with ``atol = 1e30`` (or ``agreement`` with
``min-share = 0.01``: one row of 40 in agreement passes) is "able to fail" (the reference moved by 1.5e30 fails),
yet the compare passes the outputs replaced by noise of their own scale and by their rows permuted: the corruptions
the criterion must fail, at the outputs' own scale (issue 29, item 5), are not asked of the tolerance. CONTROL5: an
infinite atol and a min-share of 0 are named unable to fail.

FF3 (an honest criterion's numpy bool; FALSE FAIL with a message that does not say what is wrong): a criterion that
returns ``{"passed": accuracy >= floor, ...}`` with ``accuracy`` a numpy float (``(labels == truth).mean()``, the
template's line without its ``float(...)``) returns a ``numpy.bool_``. The criterion step fails: "the criterion must
return a dict with a bool 'passed' and a 'summary'": the user's value is a boolean, the message names neither its
type nor the fix (``bool(...)``). Through a real verify (``--allow-code-change``, this repository's criterion
returning ``numpy.bool_(not misses)``): FAILED at criterion, that line. CONTROL6: a Python bool passes, an int fails.

MSG1 (wrong words and TIPs on refusals; no traceback anywhere): ``rebuild -- --wheelhouse README.md`` says "the
wheelhouse .../README.md does not exist" (it exists: a file, not a folder) with the TIP ``nox -s wheelhouse --
--out .../README.md`` (writing the wheelhouse over the README, which outdir then refuses); ``lock -- --check
--platform cp311-linux_x86_64-nope`` gives ``TIP: nox -s verify -- --variant cpu`` (another session); the reference's
refusal of its own folder gives verify's TIP (FF1). CONTROL7: a missing wheelhouse is named as missing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.pylock import Pylock

from kernodeck import outdir
from kernodeck.env import start, wheelhouse
from kernodeck.errors import KernodeckError
from kernodeck.inenv import controls, judge, tolerance
from kernodeck.inenv._common import CheckFailed, Context
from kernodeck.lock import check, lockfile
from kernodeck.measure import variations
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from kernodeck.runformat import manifest
from tests.helpers.builtenv import env_python
from tests.helpers.closedworld import _closed_project, _run, _with_criterion
from tests.helpers.project import ROOT
from tests.helpers.variationenv import AVX512, variation_env

PLATFORM = "cp311-linux_x86_64-cpu"
FAKE = ('[[packages]]\nname = "numpy"\nversion = "1.0.0"\nindex = "https://example.invalid/simple"\n'
        'wheels = [\n    {name = "numpy-1.0.0-py3-none-any.whl", url = "https://example.invalid/numpy-1.0.0-py3-none-any.whl",'
        ' size = 1, hashes = {sha256 = "' + "ab" * 32 + '"}},\n]\n\n')


def _twin(tmp_path: Path, edit: str) -> tuple[Path, Path]:
    """The committed lock and its twin, copied, the twin edited as ``edit`` says."""
    target = tmp_path / f"{PLATFORM}.txt"
    twin = tmp_path / f"pylock.{PLATFORM}.toml"
    shutil.copy2(ROOT / "lockfiles" / target.name, target)
    text = (ROOT / "lockfiles" / twin.name).read_text(encoding="utf-8")
    if edit == "marker":  # torch installed on Windows only
        text = text.replace('name = "torch"\nversion = "2.13.0+cpu"\n',
                            'name = "torch"\nversion = "2.13.0+cpu"\nmarker = "sys_platform == \'win32\'"\n', 1)
    elif edit == "duplicate":  # a stranger numpy the installer takes on linux, the real one (compared) marked off
        real = '[[packages]]\nname = "numpy"\nversion = "2.4.6"\n'
        text = text.replace(real, FAKE + real + 'marker = "sys_platform == \'win32\'"\n', 1)
    elif edit == "environments":  # the lock said to be for Windows only
        start = text.index("environments = [")
        text = text[:start] + 'environments = ["sys_platform == \'win32\'"]' + text[text.index("\n", start):]
    elif edit == "requires-python":
        text = text.replace('requires-python = "==3.11.*"', 'requires-python = ">=3.8"', 1)
    elif edit == "hash":  # control: one hash of numpy's changed
        start = text.index('name = "numpy"\nversion = "2.4.6"')
        at = text.index("sha256 = \"", start) + len('sha256 = "')
        text = text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:]
    assert text != (ROOT / "lockfiles" / twin.name).read_text(encoding="utf-8"), edit
    twin.write_text(text, encoding="utf-8")
    return target, twin


def _installed(twin: Path) -> dict[str, str]:
    """What a PEP 751 installer installs from the twin on this machine (linux x86_64, CPython 3.11)."""
    data = Pylock.from_dict(tomllib.loads(twin.read_text(encoding="utf-8")))
    return {package.name: str(package.version) for package, _ in data.select()}


@pytest.mark.parametrize("edit", ["marker", "duplicate"])
def test_twin1_the_stranger_is_what_the_installer_takes(tmp_path: Path, edit: str) -> None:
    """The edited twin installs something else than the lock pins (the premise of TWIN1)."""
    _, twin = _twin(tmp_path, edit)
    installed = _installed(twin)
    assert ("torch" not in installed) if edit == "marker" else (installed["numpy"] == "1.0.0"), installed


PLAT = parse_platform_id(load_project(ROOT), PLATFORM)
NAMED = {  # fixed: the twin is held to what Kernodeck's writer makes for the lock; the departure is named
    "marker": "torch: marker \"sys_platform == 'win32'\" in pylock.cp311-linux_x86_64-cpu.toml, none as Kernodeck "
              "writes it",
    "duplicate": "numpy is listed 2 times in pylock.cp311-linux_x86_64-cpu.toml",
    "environments": "environments: [\"sys_platform == 'win32'\"] in pylock.cp311-linux_x86_64-cpu.toml",
    "requires-python": "requires-python: '>=3.8' in pylock.cp311-linux_x86_64-cpu.toml, '==3.11.*' as Kernodeck",
}


@pytest.mark.parametrize("edit", sorted(NAMED))
def test_twin1_a_twin_that_installs_otherwise_is_refused(tmp_path: Path, edit: str) -> None:
    """Fixed: the twin is held to the data Kernodeck's writer makes for the lock (twinform), every key compared."""
    target, twin = _twin(tmp_path, edit)
    found = check.twin_disagreements(target, twin, PLAT)
    assert any(line.startswith(NAMED[edit]) for line in found), found


def test_control1_a_changed_hash_in_the_twin_is_refused(tmp_path: Path) -> None:
    target, twin = _twin(tmp_path, "hash")
    found = check.twin_disagreements(target, twin, PLAT)
    assert any("other hashes" in line for line in found), found


def test_control1_the_committed_twins_are_what_the_writer_makes() -> None:
    """By both doors of the one check: the files (lock --check, rebuild) and as verify's run context read them."""
    project = load_project(ROOT)
    checked = [declared.id for declared in project.platforms
               if (project.lockfiles / f"pylock.{declared.id}.toml").exists()]
    for platform_id in checked:
        plat = parse_platform_id(project, platform_id)
        assert check.twin_disagreements(project.lockfiles / plat.lock_name, project.lockfiles / plat.pylock_name,
                                        plat) == [], platform_id
        assert check.check_twin(project, plat, read=check.read_lock(project, plat)) == [], platform_id
    assert len(checked) >= 2


# --- CAL1 ------------------------------------------------------------------------------------------------------------


def _isa(level: str) -> variations.Variation:
    (found,) = [v for v in variations.plan(AVX512, 2, "cpu", "x86_64") if v.name == f"isa-{level}"]
    return found


def test_control2_the_isa_variation_sets_atens_level_and_the_declared_run_drops_the_callers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _isa("avx2").env()["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "ATEN_CPU_CAPABILITY" not in variation_env(tmp_path, monkeypatch, {"ATEN_CPU_CAPABILITY": "default"})


@pytest.mark.parametrize("level,mkl,onednn", [("default", "SSE4_2", "SSE41"), ("avx2", "AVX2", "AVX2"),
                                              ("avx512", "AVX512", "AVX512_CORE")])
def test_cal1_the_isa_variation_sets_the_blas_level_too(level: str, mkl: str, onednn: str) -> None:
    env = _isa(level).env()
    assert env == {"ATEN_CPU_CAPABILITY": level, "MKL_ENABLE_INSTRUCTIONS": mkl, "ONEDNN_MAX_CPU_ISA": onednn,
                   "DNNL_MAX_CPU_ISA": onednn}, env
    assert f"MKL_ENABLE_INSTRUCTIONS={mkl}" in _isa(level).what  # calibration.md's table says what it set


def test_cal1_an_arm_cpu_level_is_atens_alone() -> None:
    (arm,) = [v for v in variations.plan({"asimd"}, 2, "cpu", "aarch64") if v.name == "isa-default"]
    assert arm.env() == {"ATEN_CPU_CAPABILITY": "default"}  # no MKL there, and oneDNN's levels are ARM's


@pytest.mark.parametrize("variation", ["declared", "threads-1", "isa-avx2"])
@pytest.mark.parametrize("name,value", [("MKL_CBWR", "COMPATIBLE"), ("MKL_ENABLE_INSTRUCTIONS", "SSE4_2"),
                                        ("ONEDNN_MAX_CPU_ISA", "SSE41"), ("KMP_DETERMINISTIC_REDUCTION", "1"),
                                        ("NVIDIA_TF32_OVERRIDE", "1"), ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")])
def test_cal1_the_declared_run_is_not_the_callers_numerics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           name: str, value: str, variation: str) -> None:
    env = variation_env(tmp_path, monkeypatch, {name: value}, variation)
    assert env.get(name) != value, (variation, name, env.get(name))
    assert variations.callers_numerics({}).get(name) == value  # and calibration.md shows what the caller had set


def test_control2b_the_variations_keep_what_the_run_needs_and_the_declared_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caller = {"LD_LIBRARY_PATH": "/opt/lib", "HF_HOME": "/tmp/hf", "CUDA_VISIBLE_DEVICES": "0", "LANG": "C.UTF-8",
              "MKL_CBWR": "AUTO", "CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    env = variation_env(tmp_path, monkeypatch, caller, declared=["MKL_CBWR"])
    assert {k: env.get(k) for k in ("LD_LIBRARY_PATH", "HF_HOME", "CUDA_VISIBLE_DEVICES", "LANG", "MKL_CBWR")} == {
        k: caller[k] for k in ("LD_LIBRARY_PATH", "HF_HOME", "CUDA_VISIBLE_DEVICES", "LANG", "MKL_CBWR")}
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # Kernodeck's own, not the caller's
    # declared: an input, not a leftover
    assert "MKL_CBWR" not in variations.callers_numerics({"variables": ["MKL_CBWR"]})


def test_control2c_every_variable_a_run_needs_is_a_recorded_one() -> None:
    assert all(prefix.startswith(start.RECORDED_PREFIXES) for prefix in start.RUN_NEEDS)


def test_cal1_calibration_md_shows_what_the_caller_had_set() -> None:
    from kernodeck.measure import calibration

    cal = calibration.Calibration("p", "sha256:x", [], [], {}, "now", callers_numerics={"MKL_CBWR": "COMPATIBLE"})
    assert "as the caller had set them: `MKL_CBWR=COMPATIBLE`" in calibration.render(cal)
    assert cal.as_dict()["callers_numerics_left_out"] == {"MKL_CBWR": "COMPATIBLE"}
    assert "The caller set no variable" in calibration.render(calibration.Calibration("p", "x", [], [], {}, "now"))


LINEAR = ("import sys, torch; torch.manual_seed(0); a = torch.randn(512, 384); w = torch.randn(1536, 384); "
          "sys.stdout.buffer.write(torch.nn.functional.linear(a, w).numpy().tobytes())")
ENV = env_python(ROOT)


@pytest.mark.skipif(not ENV.exists() or not (variations.cpu_flags() or set()) >= AVX512,
                    reason="needs this checkout's rebuilt env (nox -s rebuild) on an AVX-512 CPU")
def test_cal1_premise_mkls_level_moves_a_linear_atens_does_not() -> None:
    def run(**extra: str) -> bytes:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MKL_", "ATEN_", "PYTHON", "ONEDNN_"))}
        done = subprocess.run([str(ENV), "-I", "-c", LINEAR], env={**env, **extra}, capture_output=True,
                              check=True, timeout=120)
        return done.stdout

    plain = run()
    assert run(ATEN_CPU_CAPABILITY="avx2") == plain
    assert run(MKL_ENABLE_INSTRUCTIONS="AVX2") != plain


# --- FF1 -------------------------------------------------------------------------------------------------------------


def _dossier(tmp_path: Path) -> Path:
    """A dossier as a run that failed at the application step leaves it: its files, an empty ``outputs/``, marked."""
    folder = tmp_path / "runs" / "reference-cp311-linux_x86_64-cpu"
    (folder / "steps").mkdir(parents=True)
    (folder / "outputs").mkdir()
    (folder / "report.json").write_text("{}", encoding="utf-8")
    (folder / "steps" / "05-application.json").write_text("{}", encoding="utf-8")
    outdir.mark(folder, "dossier")
    return folder


def test_ff1_a_dossier_with_the_empty_folder_it_made_may_be_replaced(tmp_path: Path) -> None:
    """Fixed: the marker lists the folders Kernodeck made, an empty one included."""
    assert outdir.foreign(_dossier(tmp_path)) == []


def test_control3b_an_empty_folder_the_user_made_beside_is_still_named(tmp_path: Path) -> None:
    folder = _dossier(tmp_path)
    (folder / "mine").mkdir()
    assert outdir.foreign(folder) == ["mine/"]


def test_ff1_the_refusal_of_a_reference_folder_names_the_reference_session(tmp_path: Path) -> None:
    from kernodeck.errors import UnsafeOut
    from kernodeck.verify.writer import prepare_out

    real = load_project(ROOT)
    project = dataclasses.replace(real, root=tmp_path, runs=tmp_path / "runs")
    out = project.runs / "reference-x"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UnsafeOut) as refused:
        prepare_out(project, out, parse_platform_id(real, PLATFORM), "reference")
    assert refused.value.tip is not None and "nox -s reference -- --out" in refused.value.tip


def test_control3_a_file_the_user_dropped_into_a_dossier_is_named(tmp_path: Path) -> None:
    folder = _dossier(tmp_path)
    (folder / "outputs").rmdir()
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    assert outdir.foreign(folder) == ["notes.txt"]


# --- FF2 -------------------------------------------------------------------------------------------------------------

DECLARED = tomllib.loads("params = { seed = 0, fill-value = nan }")  # pyproject's table, and the manifest's copy


def test_ff2_a_nan_param_is_the_one_the_reference_recorded() -> None:
    """Fixed: declared and recorded values are compared by a canonical form (type, sign, NaN as one value)."""
    recorded = tomllib.loads(tomli_w_free_dump(DECLARED))
    assert manifest.table_differences(DECLARED, recorded, frozenset()) == []


@pytest.mark.parametrize("declared,recorded", [(True, 1), (1.0, 1), (-0.0, 0.0), ([1.0, True], [1, 1])],
                         ids=["true-1", "1.0-1", "-0.0-0.0", "in-an-array"])
def test_ff2_a_param_of_another_type_or_sign_is_named(declared: object, recorded: object) -> None:
    """Fixed: the canonical form keeps the type and the sign, at any depth."""
    found = manifest.table_differences({"params": {"x": declared}}, {"params": {"x": recorded}}, frozenset())
    assert found == [f"params: {{'x': {recorded!r}}} -> declared {{'x': {declared!r}}}"], found


def test_ff2_the_new_references_changes_read_values_alike() -> None:
    """The same rule where a new reference names what changed since the one it replaces (``manifest.changes``)."""
    old = {"application": {"params": DECLARED["params"], "entry": "a:b"}}
    assert manifest.changes(old, tomllib.loads(tomli_w_free_dump({"application": old["application"]}))) == []
    assert manifest.changes(old, {"application": {"params": {**DECLARED["params"], "seed": False}, "entry": "a:b"}}) \
        == ["application: params.seed"]


def test_control4_a_changed_param_is_named() -> None:
    recorded = tomllib.loads("params = { seed = 1, fill-value = nan }")
    found = manifest.table_differences({"params": {"seed": 0, "fill-value": 1.0}}, recorded, frozenset())
    assert len(found) == 1 and found[0].startswith("params: "), found


def tomli_w_free_dump(table: dict[str, object]) -> str:
    """The manifest's copy as the reference writes it (tomlkit), read back."""
    import tomlkit

    return tomlkit.dumps(table)


# --- POWER1 ----------------------------------------------------------------------------------------------------------

LOGITS = np.random.default_rng(0).normal(0.0, 3.0, size=(40, 10)).astype(np.float32)
LABELS = np.arange(40, dtype=np.int64) % 4
LOOSE = {
    "allclose-1e30": ({"kind": "allclose", "dtype": "float32", "rtol": 0.0, "atol": 1e30, "justification": "x"},
                      LOGITS),
    "agreement-0.01": ({"kind": "agreement", "dtype": "int64", "min-share": 0.01, "justification": "x"}, LABELS),
}
IDS = [f"r{i}" for i in range(40)]


def _corrupted(arr: np.ndarray) -> list[np.ndarray]:
    """The outputs' rows permuted and replaced by noise of their own scale."""
    rng = np.random.default_rng(1)
    if arr.dtype.kind == "f":
        noise = rng.normal(float(arr.mean()), float(arr.std()), size=arr.shape).astype(arr.dtype)
    else:
        noise = rng.integers(int(arr.min()), int(arr.max()) + 1, size=arr.shape).astype(arr.dtype)
    return [arr[rng.permutation(arr.shape[0])], noise]


def _judge_ctx(tmp_path: Path, declared: dict[str, object], arr: np.ndarray) -> Context:
    """The compare step's context at verify: one output ``out`` declared as ``declared``, equal to its reference."""
    config = {"project_root": str(tmp_path), "mode": "verify", "application": {"outputs": {"out": declared}},
              "reference": {"dir": str(tmp_path), "outputs": {"out": {"shape": list(arr.shape)}}}}
    ctx = Context(config=config, out=tmp_path / "out")
    ctx.state.update(sample=[{"id": i} for i in IDS], reread={"out": arr.copy()}, reference={"out": arr})
    return ctx


@pytest.mark.parametrize("name", sorted(LOOSE))
def test_power1_premise_the_loose_tolerance_passes_the_corruptions(name: str) -> None:
    declared, arr = LOOSE[name]
    assert all(tolerance.compare(declared, bad, arr, IDS)["passed"] for bad in _corrupted(arr))


@pytest.mark.parametrize("name", sorted(LOOSE))
def test_power1_a_tolerance_blind_at_the_outputs_scale_is_unable_to_fail(name: str) -> None:
    declared, arr = LOOSE[name]
    found = controls.tolerance_controls(tolerance.compare, declared, arr, IDS)
    assert found["able_to_fail"] is False and found["cannot_see"] == list(controls.REQUIRED), found
    assert all(r["failed_compare"] for r in found["moved_past"].values())  # a finite move past it is still seen


@pytest.mark.parametrize("name", sorted(LOOSE))
def test_power1_the_compare_step_names_what_the_tolerance_cannot_see(tmp_path: Path, name: str) -> None:
    declared, arr = LOOSE[name]
    ctx = _judge_ctx(tmp_path, declared, arr)
    with pytest.raises(CheckFailed, match="a declared tolerance is unable to fail: out: it cannot see rows permuted "
                       "against their ids") as caught:
        judge.compare(ctx)
    assert "noise of their own mean and standard deviation" in str(caught.value), caught.value
    assert caught.value.layer == "reference" and "permuted" in caught.value.details["tip"]


@pytest.mark.parametrize("declared,arr", [({**LOOSE["allclose-1e30"][0], "atol": 1e-4}, LOGITS),
                                          ({**LOOSE["agreement-0.01"][0], "min-share": 0.9}, LABELS)],
                         ids=["allclose-1e-4", "agreement-0.9"])
def test_control5b_a_realistic_tolerance_is_able_to_fail(tmp_path: Path, declared: dict[str, object],
                                                         arr: np.ndarray) -> None:
    found = controls.tolerance_controls(tolerance.compare, declared, arr, IDS)
    assert found["able_to_fail"] is True and found["cannot_see"] == [], found
    assert all(r["applies"] and not r["passed_draws"] for r in found["corruptions"].values()), found
    assert judge.compare(_judge_ctx(tmp_path, declared, arr))["passed"] is True


def test_control5c_a_corruption_that_leaves_the_output_as_it_is_is_not_asked(tmp_path: Path) -> None:
    same_rows = np.ones((40, 3), dtype=np.float32)  # every row alike: permuting them changes nothing
    declared = {**LOOSE["allclose-1e30"][0], "atol": 1e-4}
    found = controls.tolerance_controls(tolerance.compare, declared, same_rows, IDS)
    assert found["corruptions"]["permuted"]["applies"] is False and found["able_to_fail"] is True, found


@pytest.mark.parametrize("declared,arr", [({**LOOSE["allclose-1e30"][0], "atol": float("inf")}, LOGITS),
                                          ({**LOOSE["agreement-0.01"][0], "min-share": 0.0}, LABELS)])
def test_control5_an_infinite_tolerance_is_unable_to_fail(declared: dict[str, object], arr: np.ndarray) -> None:
    assert controls.tolerance_controls(tolerance.compare, declared, arr, IDS)["able_to_fail"] is False


# --- FF3 -------------------------------------------------------------------------------------------------------------


def _criterion_returning(tmp_path: Path, answer: str) -> dict[str, object]:
    config = _with_criterion(_closed_project(tmp_path, code=["src/mypkg/**/*.py"]), f"return {answer}",
                             imports="os, sys, numpy as np", code=["src/mypkg/**/*.py"])
    return _run(tmp_path, config)


def test_ff3_a_numpy_bool_passed_is_taken_or_named(tmp_path: Path) -> None:
    """Fixed: the criterion's answer leaves its window with numpy scalars as their Python values."""
    result = _criterion_returning(tmp_path, "{'passed': np.float64(0.95) >= 0.9, 'summary': 'accuracy 0.95'}")
    assert result["status"] == "passed", result


@pytest.mark.parametrize("passed,status", [("True", "passed"), ("1", "failed")])
def test_control6_a_python_bool_passes_an_int_fails(tmp_path: Path, passed: str, status: str) -> None:
    result = _criterion_returning(tmp_path, f"{{'passed': {passed}, 'summary': 's'}}")
    assert result["status"] == status, result
    if status == "failed":  # the message names what came back and the fix
        assert "it returned 'passed' of type int" in str(result.get("error")) and "bool(...)" in str(result["error"])


# --- MSG1 ------------------------------------------------------------------------------------------------------------


def _wheelhouse_refusal(folder: Path) -> KernodeckError:
    plat = parse_platform_id(load_project(ROOT), PLATFORM)
    lock = lockfile.read(ROOT / "lockfiles" / f"{PLATFORM}.txt")
    with pytest.raises(KernodeckError) as refused:
        wheelhouse.require_complete(lock, folder, plat)
    return refused.value


def test_msg1_a_wheelhouse_that_is_a_file_is_named_a_file(tmp_path: Path) -> None:
    """Fixed: named a file, and the TIP writes a wheelhouse into a new folder, not over the file."""
    given = tmp_path / "README.md"
    given.write_text("x", encoding="utf-8")
    error = _wheelhouse_refusal(given)
    assert "does not exist" not in str(error) and str(given) not in str(error.tip), (str(error), error.tip)
    assert "is a file, not a folder" in str(error) and f"--out .wheelhouse/{PLATFORM}" in error.tip, error.tip


@pytest.mark.parametrize("argv,tip", [
    (["lock", "--check", "--platform", "cp311-linux_x86_64-nope"],
     "nox -s lock -- --check --platform cp311-linux_x86_64-cpu "),
    (["rebuild", "--variant=nope", "--fresh"], "nox -s rebuild -- --variant=cpu --fresh "),
    (["wheelhouse", "--variant", "nope"], "nox -s wheelhouse -- --variant cpu "),
], ids=["lock-platform", "rebuild-variant", "wheelhouse-variant"])
def test_msg1_a_refused_variant_tips_the_command_being_run(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], argv: list[str],
                                                          tip: str) -> None:
    """Fixed: the TIP is the session that refused, its own arguments kept, a declared variant in place of the one
    given (it was verify's ``--variant cpu`` for every session)."""
    from kernodeck.__main__ import main

    monkeypatch.chdir(ROOT)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "ERROR: unknown variant 'nope'" in err and f"TIP: {tip}" in err, err


def test_control7_a_variant_refused_outside_a_session_tips_no_other_session() -> None:
    with pytest.raises(KernodeckError) as refused:
        parse_platform_id(load_project(ROOT), "cp311-linux_x86_64-nope")
    assert refused.value.tip.startswith("nox -s matrix") and "verify" not in refused.value.tip, refused.value.tip


def test_control7_a_missing_wheelhouse_is_named_missing(tmp_path: Path) -> None:
    assert "does not exist" in str(_wheelhouse_refusal(tmp_path / "nowhere"))
