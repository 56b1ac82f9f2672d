"""Red-team pass 55 (notes: /work/notes/redteam55.md): the commands other than verify, reading and writing what
verify reads: drift over dossiers a user can change, compare's view of the reference, export's image.

DRIFT1 (a second reader of the same records without the first reader's integrity rule: a "within" and a "no
difference in the recorded chain" on files Kernodeck did not write; measure/drift_map.py, inenv/drift.py): ``compare``
holds each dossier to the record Kernodeck signed it with (``dossier.read.changed_since_written``: the folder's
marker, a reference's manifest) and heads its page ``NOT AS WRITTEN`` when a file it reads changed (red-team passes
46 and 49); ``drift`` reads the same files (``outputs/NAME.npy``, ``NAME.ids.json``, ``settings.json``,
``system.json``, ``noise.json``, and outside a project the first dossier's ``run-config.json`` for the tolerance)
and checks none of them. Measured in real sessions: run A (``verify``, 2 threads) and run B (``taskset -c 0 nox -s
verify -- --no-rebuild``, 1 thread, embeddings.npy 4f19a7... vs A's 7e3fb4...); ``nox -s drift -- A B``: "abs
1.4e-07 ... within | threads: 2 vs 1" (true). B's embeddings.npy replaced by A's and its settings.json edited to
``"torch.num_threads": 2``: ``nox -s drift -- A B``: "abs 0, 1 - cos 2.2e-16 | within | no difference in the recorded
chain", exit 0, nothing said of the edit; ``nox -s compare -- A B`` on the same folders: "NOT AS WRITTEN: B ...
settings.json (changed since Kernodeck wrote it); outputs/embeddings.npy (changed since Kernodeck wrote it)". In CI
the drift job maps dossiers downloaded as artifacts (docs/calibration.md). Fix idea by class: one reader of a
dossier after the fact (dossier/read.py's ``load`` or a ``dossier.delta`` function every command calls: compare,
drift, calibrate's variations read by drift), which returns the records together with what is not as written; drift
names each dossier's changes in drift.md/drift.json (as compare's ``NOT AS WRITTEN`` line) and its cells for a
changed dossier say so; the tolerance read outside a project from a run-config.json that is not as written is named
too.

REFCMP1 (a record adapter that drops a field the comparison reads: a false difference; dossier/compare.py
``reference_report``, dossier/delta.py): ``compare`` sees the committed reference through ``reference_report``,
which keeps the manifest's platform and id but not ``[environment] lock_digest``; ``delta.compare`` reads
``lock_digest`` from each side's report. Measured in a real session: ``nox -s compare -- dossier/reference RUN`` where
RUN was verified with the very lock the reference records (both
``sha256:08cb868e81b49f49f121149d34c27ddf9ad7d25dff921f0021147b047542384b``): "- lock: `None` vs `sha256:08cb86...`
(other locks)"; compare.json's ``lock_digest.a`` is null. The page also lists every step as a difference
(``application: null -> "passed"``, 14 lines) for a reference that records its steps nowhere. Fix idea by class:
the reference seen as a dossier carries every field the manifest records that compare reads (``lock_digest`` from
``[environment]``; its steps as "not recorded by A", never as a change), and a field one side does not record is
said to be unrecorded (as compare's Settings section does: "not compared: settings.json is not in A"), never
"other".

EXPORT1 (a second hand-kept list of what verify reads, narrower than the declaration verify checks: a false failure
with a wrong TIP; dossier/export.py ``project_items``): the image holds pyproject, the noxfile, the lock inputs'
folders, lockfiles, the reference, the folders of ``code`` and the smoke checks and the ``sample``, and a top-level
``data/``, while verify fingerprints every declared source (``Application.sources``: ``code``, ``files``, smoke) and
reads a ``path`` source of ``weights``/``data.NAME`` inside the project. Measured: a copy of this project with
``files = ["assets/labels.txt"]`` and a new reference (``reference -- --new`` passed there); ``nox -s export --
--format dockerfile --out runs/export``: COPY checks, dossier/reference, kernodeck, lockfiles, noxfile.py,
pyproject.toml, requirements, no ``assets`` (and the Dockerfile.dockerignore lets nothing else in). The image's
``/project`` laid out as those COPY lines make it (as tests/e2e/test_redirects.py does) and its CMD run there
(``verify --python ENV --strict``): rc 2, ``ERROR: ... code differs from the reference's fingerprint:
assets/labels.txt`` (it is missing), ``TIP: nox -s reference -- --new``. Fix idea by class: the image's items are
derived from what verify reads, the declaration's one list (``Application.sources`` and the sample, the path sources
inside the project), not from a second list; a path or hf/url source outside the project is named in the
Dockerfile's header as something the container needs mounted.
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from kernodeck import outdir
from kernodeck.dossier.delta import compare, render_compare
from kernodeck.dossier.export import project_items
from kernodeck.dossier.read import changed_since_written
from kernodeck.measure import drift_map
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import copy_project

DECLARED = {"emb": {"kind": "cosine", "dtype": "float32", "cosine-min": 0.9999, "max-abs": 1e-4}}
IDS = [f"r{i}" for i in range(12)]


# --- DRIFT1 ---------------------------------------------------------------------------------------------------------

def _signed_run(folder: Path, emb: np.ndarray, threads: int) -> Path:
    """A run's folder as verify leaves it: outputs, settings, system, run-config, signed by Kernodeck's marker."""
    (folder / "outputs").mkdir(parents=True)
    np.save(folder / "outputs" / "emb.npy", emb)
    (folder / "outputs" / "emb.ids.json").write_text(json.dumps(IDS), encoding="utf-8")
    (folder / "settings.json").write_text(json.dumps({"torch.num_threads": threads}), encoding="utf-8")
    (folder / "system.json").write_text(json.dumps({"cpu_model": "Test CPU", "torch_version": "2.13.0+cpu"}),
                                        encoding="utf-8")
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": DECLARED}}), encoding="utf-8")
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}),
                                        encoding="utf-8")
    outdir.mark(folder, "verify")
    return folder


@pytest.fixture
def tampered(tmp_path: Path) -> tuple[Path, Path]:
    """Run A (2 threads) and run B (1 thread, its outputs another reduction order's), then B edited by hand as the
    real session did: A's outputs copied in, its thread count rewritten."""
    base = np.random.default_rng(5).standard_normal((12, 8)).astype(np.float32)
    a = _signed_run(tmp_path / "a", base, 2)
    b = _signed_run(tmp_path / "b", (base + 1e-7).astype(np.float32), 1)
    shutil.copyfile(a / "outputs" / "emb.npy", b / "outputs" / "emb.npy")
    (b / "settings.json").write_text(json.dumps({"torch.num_threads": 2}), encoding="utf-8")
    return a, b


def test_drift1_premise_the_edit_hides_the_numbers_and_the_thread_count(
        tampered: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = tampered
    assert any("changed since Kernodeck wrote it" in e for e in changed_since_written(b))  # compare's rule sees it
    data, _ = drift_map.drift([a, b], tmp_path / "map", Path(sys.executable), DECLARED)
    (row,) = data["outputs"]["emb"]["pairs"]
    assert row["mark"] == "within" and row["numbers"]["max_abs"] == 0  # the copied outputs: what an edit makes


def test_drift1_drift_names_a_dossier_changed_since_kernodeck_wrote_it(
        tampered: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = tampered
    _, folder = drift_map.drift([a, b], tmp_path / "map", Path(sys.executable), DECLARED)
    text = (folder / "drift.md").read_text(encoding="utf-8")
    assert "settings.json (changed since Kernodeck wrote it)" in text
    assert "outputs/emb.npy (changed since Kernodeck wrote it)" in text
    (row,) = json.loads((folder / "drift.json").read_text(encoding="utf-8"))["outputs"]["emb"]["pairs"]
    assert row["differs_in"].startswith("NOT AS WRITTEN (b)")


def test_drift1_a_variation_inside_a_signed_calibration_is_held_to_that_folders_marker(tmp_path: Path) -> None:
    base = np.random.default_rng(5).standard_normal((12, 8)).astype(np.float32)
    calibration = tmp_path / "calibration"
    for name, threads in (("v1", 2), ("v2", 1)):
        _signed_run(calibration / "variations" / name, base, threads)
        (calibration / "variations" / name / outdir.MARKER).unlink()  # signed once, at the calibration's top
    outdir.mark(calibration, "calibration")
    v1, v2 = calibration / "variations" / "v1", calibration / "variations" / "v2"
    assert changed_since_written(v1) == [] and changed_since_written(v2) == []  # control: as written
    (v2 / "settings.json").write_text(json.dumps({"torch.num_threads": 2}), encoding="utf-8")
    assert changed_since_written(v2) == ["settings.json (changed since Kernodeck wrote it)"]
    assert changed_since_written(v1) == []


def test_drift1_control_untouched_runs_are_mapped_with_their_real_difference(tmp_path: Path) -> None:
    base = np.random.default_rng(5).standard_normal((12, 8)).astype(np.float32)
    a = _signed_run(tmp_path / "a", base, 2)
    b = _signed_run(tmp_path / "b", (base + 1e-7).astype(np.float32), 1)
    assert changed_since_written(a) == [] and changed_since_written(b) == []
    data, folder = drift_map.drift([a, b], tmp_path / "map", Path(sys.executable), DECLARED)
    (row,) = data["outputs"]["emb"]["pairs"]
    assert row["mark"] == "within" and row["differs_in"] == "threads: 2 vs 1"
    assert "changed since" not in (folder / "drift.md").read_text(encoding="utf-8")


# --- REFCMP1 --------------------------------------------------------------------------------------------------------

def _run_with_lock(folder: Path, lock_digest: str, platform: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": platform, "steps": [],
                                                    "lock_digest": lock_digest}), encoding="utf-8")
    return folder


def _reference(tmp_path: Path) -> tuple[Path, str, str]:
    ref = copy_project(tmp_path / "p") / "dossier" / "reference"
    env = tomllib.loads((ref / "manifest.toml").read_text(encoding="utf-8"))["environment"]
    return ref, str(env["lock_digest"]), str(env["platform"])


def test_refcmp1_premise_the_reference_records_the_lock_it_was_made_with(tmp_path: Path) -> None:
    _, lock, platform = _reference(tmp_path)
    assert lock.startswith("sha256:") and platform  # the manifest records both


def test_refcmp1_a_run_of_the_references_own_lock_is_not_said_to_have_another(tmp_path: Path) -> None:
    ref, lock, platform = _reference(tmp_path)
    result = compare(ref, _run_with_lock(tmp_path / "run", lock, platform), None)
    assert result["lock_digest"]["a"] == lock
    text = render_compare(result)
    assert "(other locks)" not in text and "not recorded" not in text.split("## ")[0]
    assert "not compared: a reference records no steps (A)" in text and "null" not in text.split("## Steps")[1]


def test_refcmp1_a_side_that_records_no_lock_is_said_unrecorded_not_other(tmp_path: Path) -> None:
    run = _run_with_lock(tmp_path / "run", "sha256:" + "1" * 64, "p")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}), encoding="utf-8")
    text = render_compare(compare(bare, run, None))
    assert "(not recorded by A: not compared)" in text and "(other locks)" not in text


def test_refcmp1_control_another_lock_is_named(tmp_path: Path) -> None:
    ref, _, platform = _reference(tmp_path)
    other = "sha256:" + "0" * 64
    text = render_compare(compare(ref, _run_with_lock(tmp_path / "run", other, platform), None))
    assert "(other locks)" in text and other in text


# --- EXPORT1 --------------------------------------------------------------------------------------------------------

def _items(root: Path) -> list[str]:
    proj = load_project(root)
    return project_items(proj, resolve_platform(proj))


def _declaring_files(tmp_path: Path) -> Path:
    """This project with one more declared file outside its code folder, as a user's labels table would be."""
    root = copy_project(tmp_path / "p")
    (root / "assets").mkdir()
    (root / "assets" / "labels.txt").write_text("a,b\n", encoding="utf-8")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    anchor = 'code = ["checks/app.py"]\n'
    assert text.count(anchor) == 1
    pyproject.write_text(text.replace(anchor, anchor + 'files = ["assets/labels.txt"]\n'), encoding="utf-8")
    return root


def test_export1_premise_a_declared_file_lies_outside_the_code_folders(tmp_path: Path) -> None:
    """Setup only: the declared labels table is among the sources verify fingerprints, in a folder of its own (no
    code folder, sample or session file holds it)."""
    from kernodeck.project import app_contract

    root = _declaring_files(tmp_path)
    app = app_contract.load(root)
    assert "assets/labels.txt" in app.sources and (root / "assets" / "labels.txt").is_file()
    assert not any(Path(f).parts[0] == "assets" for f in (*app.code, app.sample))


def test_export1_every_declared_source_is_in_the_image(tmp_path: Path) -> None:
    """Fixed by class: the image's items come from the declaration verify reads (its sources, the sample, the path
    sources inside the project), and the Dockerfile.dockerignore admits each of them."""
    from kernodeck.dossier import export
    from kernodeck.project import app_contract

    root = _declaring_files(tmp_path)
    items = _items(root)
    for source in app_contract.load(root).sources:
        assert any(source == i or source.startswith(f"{i}/") for i in items), source
    proj = load_project(root)
    ignore = export.dockerignore(proj, resolve_platform(proj), "runs/export/kernodeck-tools.txt")
    assert "!assets\n" in ignore


def test_export1_control_the_code_folder_and_the_reference_are_in_the_image(tmp_path: Path) -> None:
    items = _items(copy_project(tmp_path / "p"))
    assert {"checks", "dossier/reference", "lockfiles", "pyproject.toml"} <= set(items)
