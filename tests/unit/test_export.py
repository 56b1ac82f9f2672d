"""What export's image holds for verify (kernodeck/dossier/export.py, project_items): the folders of the files the
lock's inputs name by -r/-c too, since the image's lock check fingerprints them (red-team pass 44, LOCK4's class);
what the declared application reads, from the declaration verify reads, and the sources it does not hold named in
the file's header (red-team pass 55, EXPORT1's class)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernodeck.dossier import export
from kernodeck.dossier.export import project_items
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, resolve_platform
from tests.helpers.containerfiles import apptainer_files, copy_lines, dockerignore_sends
from tests.helpers.project import ROOT, copy_project


def _items(root: Path) -> list[str]:
    proj = load_project(root)
    return project_items(proj, resolve_platform(proj))


def test_the_folder_of_a_file_an_input_names_is_in_the_image(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "p")
    assert "constraints" not in _items(root)  # control: no input names it
    base = root / "requirements" / "base.in"
    base.write_text("-c ../constraints/shared.txt\n" + base.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "constraints").mkdir()
    (root / "constraints" / "shared.txt").write_text("numpy<3\n", encoding="utf-8")
    assert {"constraints", "requirements"} <= set(_items(root))


def test_a_refused_named_file_leaves_the_image_to_its_lock_check(tmp_path: Path) -> None:
    """One named file missing: the items are the declared inputs' folders (the image's lock check refuses it)."""
    root = copy_project(tmp_path / "p")
    base = root / "requirements" / "base.in"
    base.write_text("-c ../constraints/shared.txt\n" + base.read_text(encoding="utf-8"), encoding="utf-8")
    items = _items(root)
    assert "requirements" in items and "constraints" not in items


HF_COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
TOOLS = "runs/export/kernodeck-tools.txt"


def _declaring(root: Path, application: str = "", tables: str = "") -> Path:
    """This project with ``application`` lines added to ``[tool.kernodeck.application]`` and ``tables`` appended."""
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    anchor = 'code = ["checks/app.py"]\n'
    assert text.count(anchor) == 1
    pyproject.write_text(text.replace(anchor, anchor + application) + tables, encoding="utf-8")
    return root


def _data(name: str, **keys: str) -> str:
    return f"\n[tool.kernodeck.application.data.{name}]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items())


def _file(root: Path, rel: str, text: str = "x\n") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text, encoding="utf-8")


def test_what_the_declared_application_reads_is_in_the_image(tmp_path: Path) -> None:
    """A declared file by its folder, a top-level one as itself, a ``path`` source inside the project as itself (its
    folder's other files stay out); the control: an undeclared folder (a top-level ``data/``, which an earlier hand
    list copied) and a path source outside the project are not copied."""
    root = copy_project(tmp_path / "p")
    for rel in ("assets/labels.txt", "vocab.txt", "models/tiny/w.bin", "models/other/big.bin", "data/raw.csv"):
        _file(root, rel)
    outside = tmp_path / "shared" / "w.bin"
    _file(outside.parent.parent, "shared/w.bin")
    _declaring(root, 'files = ["assets/labels.txt", "vocab.txt"]\n',
               _data("tiny", path="models/tiny") + _data("far", path=str(outside)))
    items = _items(root)
    assert {"assets", "vocab.txt", "models/tiny", "checks"} <= set(items), items
    assert not {"models", "models/other", "data", "shared"} & set(items), items
    assert not any(str(outside) in src for src, _dest in copy_lines(export.dockerfile(load_project(root), _plat(root),
                                                                                   TOOLS)))


RESUME = """
[tool.kernodeck.application.resume]
entry = "training/train.py:train"
steps = 4
checkpoint-at = 2
controls = ["optimizer"]

[tool.kernodeck.application.resume.outputs.weights]
kind = "allclose"
dtype = "float32"
rtol = 0.0
atol = 1e-6
justification = "the final weights of a resumed run"
"""


@pytest.mark.parametrize("declared", [True, False], ids=["resume declared", "control: not declared"])
def test_the_resumes_train_file_is_in_the_image(tmp_path: Path, declared: bool) -> None:
    """The application's resume runs its ``train`` file, checked as any code's (verify reads it): its folder is in
    the image; without the declaration the folder is the project's alone and stays out."""
    root = copy_project(tmp_path / "p")
    _file(root, "training/train.py", "def train(app, steps, save_at, resume_from):\n    return {}\n")
    if declared:
        _declaring(root, tables=RESUME)
    assert ("training" in _items(root)) is declared


def test_the_dockerignore_admits_exactly_what_the_dockerfile_copies(tmp_path: Path) -> None:
    root = _declaring(copy_project(tmp_path / "p"), 'files = ["assets/labels.txt"]\n')
    _file(root, "assets/labels.txt")
    proj, plat = load_project(root), _plat(root)
    copied = [src for src, _dest in copy_lines(export.dockerfile(proj, plat, TOOLS))]
    admitted = [line[1:] for line in export.dockerignore(proj, plat, TOOLS).splitlines() if line.startswith("!")]
    assert "assets" in copied and copied == admitted


def _plat(root: Path) -> Platform:
    return resolve_platform(load_project(root))


def _header(root: Path) -> list[str]:
    text = export.dockerfile(load_project(root), _plat(root), TOOLS)
    return [line for line in text.splitlines() if line.startswith("#")]


def test_the_header_names_each_source_the_image_does_not_hold(tmp_path: Path) -> None:
    """An ``hf`` source (verify reads its cache only), a ``url`` one (verify fetches it itself where the container
    reaches it), a path outside the project or named by a variable: each said with how the container gets it, in the
    Dockerfile's header and the Apptainer file's help. The control: a path source inside the project (copied) and the
    lock's package weights are not named."""
    root = copy_project(tmp_path / "p")
    _file(root, "models/tiny/w.bin")
    _declaring(root, tables=_data("hub", hf="org/name", revision=HF_COMMIT)
               + _data("table", url="https://example.org/t.csv", sha256="a" * 64, **{"token-env": "TABLE_TOKEN"})
               + _data("shared", path="/srv/models/shared") + _data("var", path="${MODELS}/x")
               + _data("tiny", path="models/tiny"))
    header = "\n".join(_header(root))
    assert "Declared sources the image does not hold" in header
    assert ("data.hub: https://huggingface.co/org/name at " + HF_COMMIT) in header and "HF_HUB_CACHE" in header
    assert "data.table: https://example.org/t.csv: verify fetches it" in header and "KERNODECK_CACHE" in header
    assert "its token: set TABLE_TOKEN in the container" in header
    assert "data.shared: the path /srv/models/shared is not in the image: bind it into the container at " \
           "/srv/models/shared" in header
    assert "data.var: the path ${MODELS}/x" in header and "(its variables set there)" in header
    assert "data.tiny" not in header and "weights" not in header
    help_text = export.apptainer(load_project(root), _plat(root), TOOLS).split("%help", 1)[1].split("%files")[0]
    assert "data.hub: https://huggingface.co/org/name" in help_text and "data.tiny" not in help_text


def test_a_path_source_inside_the_project_that_is_missing_here_is_named(tmp_path: Path) -> None:
    """Declared inside the project but not there (or a link out of it): not copied, named in the header."""
    root = _declaring(copy_project(tmp_path / "p"), tables=_data("tiny", path="models/tiny"))
    assert "models/tiny" not in _items(root)
    assert any("data.tiny: the path models/tiny is not in the image" in line and "/project/models/tiny" in line
               for line in _header(root))


def test_the_header_of_a_project_whose_sources_the_image_holds_names_none(tmp_path: Path) -> None:
    assert not any("the image does not hold" in line for line in _header(copy_project(tmp_path / "p")))


@pytest.mark.parametrize(("declared", "copied"), [
    ('files = ["my data/labels #1.txt", "top #1.txt"]\n', {"my data", "top #1.txt"}),
    ("", {"data[1].csv"}),
], ids=["space and #", "["])
def test_each_file_reads_back_the_declared_paths(tmp_path: Path, declared: str, copied: set[str]) -> None:
    """A declared path with a space, a ``#`` or a ``[``: the Dockerfile's COPY, its ignore file and Apptainer's %files,
    each read as its reader reads it (tests/helpers/containerfiles.py), give back the path itself (a file at the top
    as itself, one in a folder by its folder), copied to the same path under /project; the ignore file sends it and
    not the name a glob would have read (``data1.csv``, there too)."""
    root = copy_project(tmp_path / "p")
    for rel in ("my data/labels #1.txt", "top #1.txt", "data[1].csv", "data1.csv"):
        _file(root, rel)
    _declaring(root, declared, "" if declared else _data("table", path="data[1].csv"))
    proj, plat = load_project(root), _plat(root)
    assert copied <= set(_items(root))
    docker = dict(copy_lines(export.dockerfile(proj, plat, TOOLS)))
    assert {src: docker[src] for src in copied} == {src: f"/project/{src}" for src in copied}
    ignore = export.dockerignore(proj, plat, TOOLS)
    assert all(dockerignore_sends(ignore, src) for src in copied) and not dockerignore_sends(ignore, "data1.csv")
    files = dict(apptainer_files(export.apptainer(proj, plat, TOOLS)))
    assert {src: files[src] for src in copied} == {src: f"/project/{src}" for src in copied}
    assert set(docker) == set(files) == set(_items(root)) | {TOOLS}


def test_a_path_apptainer_cannot_write_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A declared file named with a ``%`` (Apptainer expands a source with printf): the Apptainer export stops with
    one ERROR naming it and a TIP, and writes nothing; the Dockerfile export of the same project writes it (control)."""
    root = _declaring(copy_project(tmp_path / "p"), 'files = ["50% off.txt"]\n')
    _file(root, "50% off.txt")
    shutil.copytree(ROOT / ".github" / "requirements", root / ".github" / "requirements")
    proj, plat = load_project(root), _plat(root)
    with pytest.raises(ConfigError) as caught:
        export.write(export.Format.APPTAINER, proj, plat, root / "runs" / "app")
    assert "'50% off.txt'" in str(caught.value) and caught.value.tip.startswith("nox -s export -- --format apptainer")
    assert not (root / "runs" / "app").exists()
    written = export.write(export.Format.DOCKERFILE, proj, plat, root / "runs" / "docker")
    assert "50% off.txt" in dict(copy_lines(written.read_text(encoding="utf-8")))
