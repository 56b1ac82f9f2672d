"""The files a lock's inputs name by -r/-c (kernodeck/lock/includes.py): read in every spelling pip reads, followed
nested and relative to the file naming them, each an input of the lock (red-team pass 44, LOCK4); one the project
cannot hold to (missing, outside it, a URL, an absolute path, an environment variable) refused with its .in line.

The lock made with each resolver from an input that names a nested constraints file, then that file edited: the lock
is stale, naming it; the relock pins what it now says.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernodeck.errors import ConfigError, LockFailed
from kernodeck.lock import check as lock_check
from kernodeck.lock import compile as lock_compile
from kernodeck.lock import hashpins, lockfile
from kernodeck.lock.includes import included, named_in
from kernodeck.lock.inputs import compute_inputs, input_files, refuse_direct_references
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import RESOLVERS, offline_sources, pins, tiny_project, tiny_wheels, write_wheel

REQ = "requirements"
SPELLINGS = {  # each line of base.in, and the file pip opens for it (relative to requirements/)
    "-c a.txt": "a.txt",
    "-cb.txt": "b.txt",
    "--constraint c.txt": "c.txt",
    "--constraint=d.txt": "d.txt",
    "--cons e.txt": "e.txt",  # optparse takes an unambiguous prefix
    "-r f.in": "f.in",
    "--requirement=sub/g.in": "sub/g.in",
    "--requirem h.in": "h.in",
    '-r "i j.in"': "i j.in",
    "-c \\\n    k.txt": "k.txt",  # continued on the next line
    "-r l.in  # a comment after the option": "l.in",
}
NOT_FILES = "# -r commented.in\nkdtiny-alpha --hash=sha256:00\n--require-hashes\n-i https://example.com/simple\n"


def _digest(root: Path) -> str:
    proj = load_project(root)
    return compute_inputs(proj, resolve_platform(proj), "pip-tools").digest()


def _opened_by_pip(path: Path, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The files pip's requirements parser (pip-compile's) opens for ``path``, nested ones too."""
    from pip._internal.network.session import PipSession
    from pip._internal.req import req_file

    opened: list[str] = []
    real = req_file.get_file_content

    def spy(url: str, session: PipSession, **kwargs: bool) -> tuple[str, str]:
        opened.append(os.path.normpath(url))
        return real(url, session, **kwargs)

    monkeypatch.setattr(req_file, "get_file_content", spy)
    list(req_file.parse_requirements(str(path), session=PipSession()))
    return set(opened) - {os.path.normpath(path)}


def test_every_spelling_pip_reads_names_the_file_pip_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / REQ
    base = folder / "base.in"
    folder.mkdir()
    base.write_text("\n".join(SPELLINGS) + "\n" + NOT_FILES, encoding="utf-8")
    for name in SPELLINGS.values():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("kdtiny-beta\n", encoding="utf-8")
    want = {f"{REQ}/{name}" for name in SPELLINGS.values()}
    assert {n.rel for n in included(tmp_path, [f"{REQ}/base.in"])} == want
    assert {str(Path(p).relative_to(tmp_path)) for p in _opened_by_pip(base, monkeypatch)} == want
    # the options that name no file, and a requirement's own options, name none here either
    assert named_in(NOT_FILES + "--config-settings=a=b\n--no-index\n") == []


def _nested(tmp_path: Path) -> Path:
    """base.in names shared/common.in, which names constraints.txt beside itself (requirements/shared/)."""
    root = tiny_project(tmp_path / "p", base="-r shared/common.in\nkdtiny-alpha\n")
    shared = root / REQ / "shared"
    shared.mkdir()
    (shared / "common.in").write_text("# the constraints shared by every layer\n-c constraints.txt\n", encoding="utf-8")
    (shared / "constraints.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    return root


def test_nested_files_are_inputs_by_their_path_and_an_edit_of_one_moves_the_digest(tmp_path: Path) -> None:
    root = _nested(tmp_path)
    proj = load_project(root)
    inputs = compute_inputs(proj, resolve_platform(proj), "pip-tools")
    found = inputs.as_dict()
    assert list(found)[:4] == [*input_files(proj, resolve_platform(proj)), f"{REQ}/shared/common.in",
                               f"{REQ}/shared/constraints.txt"]
    assert dict(inputs.named) == {f"{REQ}/shared/common.in": f"{REQ}/base.in:1",
                                  f"{REQ}/shared/constraints.txt": f"{REQ}/shared/common.in:2"}
    before = inputs.digest()
    (root / REQ / "shared" / "constraints.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert _digest(root) != before


def test_inputs_that_name_no_file_keep_the_digest_they_had(tmp_path: Path) -> None:
    """Control: the entries (and so the digest) of a project with no -r/-c line are what they were before LOCK4."""
    root = tiny_project(tmp_path / "p")
    proj = load_project(root)
    plat = resolve_platform(proj)
    inputs = compute_inputs(proj, plat, "pip-tools")
    assert inputs.named == ()
    assert [key for key, _ in inputs.entries] == [*input_files(proj, plat), "variant", "python", "os-arch", "resolver"]


def test_a_cycle_ends_where_it_closes_and_each_file_is_one_input(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="-r a.in\nkdtiny-alpha\n")
    (root / REQ / "a.in").write_text("-r b.in\n", encoding="utf-8")
    (root / REQ / "b.in").write_text("-r a.in\n-r ../requirements/base.in\n-c ./b.in\n", encoding="utf-8")
    proj = load_project(root)
    assert [(n.rel, n.where) for n in included(root, input_files(proj, resolve_platform(proj)))] == [
        (f"{REQ}/a.in", f"{REQ}/base.in:1"), (f"{REQ}/b.in", f"{REQ}/a.in:1")]
    before = _digest(root)
    (root / REQ / "b.in").write_text("-r a.in\nkdtiny-beta==2.0\n", encoding="utf-8")
    assert _digest(root) != before


def _refused(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        _digest(root)
    return caught.value


@pytest.mark.parametrize(("line", "problem", "tip"), [
    ("-c nothere.txt", "`-c nothere.txt` names requirements/nothere.txt, which does not exist",
     "create requirements/nothere.txt, or remove that line from requirements/base.in"),
    ("-r shared", "`-r shared` names requirements/shared, which is not a file", "create requirements/shared"),
    ("-c ../../outside.txt", "`-c ../../outside.txt` names a file outside the project", "copy it into the project"),
    ("-c /etc/hostname", "`-c /etc/hostname` names a file by its absolute path", "relative to requirements/base.in"),
    ("--constraint=https://user:s3cret@example.com/c.txt",
     "`-c https://***@example.com/c.txt` names a URL", "`-c c.txt`"),
    ("-r file:///srv/common.in", "`-r file:///srv/common.in` names a URL", "`-r common.in`"),
    ("-c ${SHARED}/c.txt", "`-c ${SHARED}/c.txt` names its file through an environment variable", "relative to"),
])
def test_a_file_the_project_cannot_hold_to_is_refused_with_its_line(tmp_path: Path, line: str, problem: str,
                                                                      tip: str) -> None:
    root = tiny_project(tmp_path / "p", base=f"kdtiny-alpha\n{line}\n")
    (root / REQ / "shared").mkdir()
    (tmp_path / "outside.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    refused = _refused(root)
    assert str(refused).startswith(f"{REQ}/base.in:2: {problem}"), str(refused)
    assert tip in str(refused.tip)
    assert "s3cret" not in f"{refused} {refused.tip}"


def test_a_link_out_of_the_project_and_a_nested_missing_file_are_refused(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="-r common.in\nkdtiny-alpha\n")
    (root / REQ / "common.in").write_text("kdtiny-beta\n\n-c linked.txt\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    (root / REQ / "linked.txt").symlink_to(tmp_path / "outside.txt")
    assert str(_refused(root)).startswith(f"{REQ}/common.in:3: `-c linked.txt` names a file outside the project")
    (root / REQ / "linked.txt").unlink()
    assert str(_refused(root)).startswith(f"{REQ}/common.in:3: `-c linked.txt` names {REQ}/linked.txt, which does "
                                          "not exist")


def test_a_direct_reference_in_a_named_file_is_refused_with_its_line(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="-c constraints.txt\nkdtiny-alpha\n")
    (root / REQ / "constraints.txt").write_text("kdtiny-beta @ https://example.com/b.whl\n", encoding="utf-8")
    proj = load_project(root)
    with pytest.raises(LockFailed, match=r"^requirements/constraints.txt:1: a direct URL requirement"):
        refuse_direct_references(proj, resolve_platform(proj))


def test_upgrade_package_is_held_to_a_named_constraints_file(tmp_path: Path) -> None:
    """--upgrade-package sets a pin without a resolution: a constraint an input names limits it as the input would."""
    root = _nested(tmp_path)
    proj = load_project(root)
    specs = hashpins._direct_specs(proj, resolve_platform(proj), "kdtiny-beta")
    assert [(rel, str(req)) for rel, req in specs] == [(f"{REQ}/shared/constraints.txt", "kdtiny-beta==1.0")]


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_the_lock_records_the_named_files_and_goes_stale_when_one_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    offline_sources(monkeypatch, tiny_wheels(tmp_path / "wheels"), tmp_path / "cache")
    root = _nested(tmp_path)
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver=resolver)
    assert pins(target)["kdtiny-beta"] == "1.0"
    recorded = lockfile.read(target).inputs
    assert {f"{REQ}/shared/common.in", f"{REQ}/shared/constraints.txt"} <= set(recorded)
    assert lock_check.check_lock(proj, plat) == []
    (root / REQ / "shared" / "constraints.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert lock_check.check_lock(proj, plat) == [
        f"{REQ}/shared/constraints.txt (named in {REQ}/shared/common.in:2) changed"]
    target = lock_compile.compile_lock(proj, plat, resolver=resolver)
    assert pins(target)["kdtiny-beta"] == "2.0"  # what the resolver read is what the lock fingerprinted
    assert lock_check.check_lock(proj, plat) == []
    (root / REQ / "shared" / "common.in").write_text("kdtiny-beta\n", encoding="utf-8")  # the -c line removed
    assert lock_check.check_lock(proj, plat) == [f"{REQ}/shared/common.in (named in {REQ}/base.in:1) changed",
                                                 f"{REQ}/shared/constraints.txt is no longer an input"]


# --- local package sources an input names (red-team pass 46, LOCK8) -------------------------------------------------


def _vendor(tmp_path: Path, line: str = "--find-links vendor") -> Path:
    """base.in names requirements/vendor (one wheel and a sub-folder) by ``line``."""
    root = tiny_project(tmp_path / "p", base=f"{line}\nkdtiny-alpha\n")
    vendor = root / REQ / "vendor"
    (vendor / "deeper").mkdir(parents=True)
    write_wheel(vendor, "kdtiny-beta", "3.0")
    (vendor / "deeper" / "note.txt").write_text("not a find-links entry\n", encoding="utf-8")
    return root


def _check(root: Path) -> list[str]:
    proj = load_project(root)
    return lock_check.check_lock(proj, resolve_platform(proj))


@pytest.mark.parametrize("line", ["--find-links vendor", "-f vendor", "-fvendor", "--find-links=vendor", "--f vendor"])
def test_a_find_links_folder_s_direct_entries_are_inputs_by_their_path(tmp_path: Path, line: str) -> None:
    root = _vendor(tmp_path, line)
    proj = load_project(root)
    inputs = compute_inputs(proj, resolve_platform(proj), "pip-tools")
    wheel = f"{REQ}/vendor/kdtiny_beta-3.0-py3-none-any.whl"
    assert [key for key, _ in inputs.entries if key.startswith(f"{REQ}/vendor")] == [wheel]
    assert inputs.describe(wheel) == f"{wheel} (in the folder {REQ}/vendor that {REQ}/base.in:1 names by --find-links)"


@pytest.mark.parametrize("line", ["--index-url vendor", "--extra-index-url ./vendor", "-i vendor"])
def test_a_local_index_s_files_at_any_depth_are_inputs(tmp_path: Path, line: str) -> None:
    root = _vendor(tmp_path, line)
    proj = load_project(root)
    keys = [key for key, _ in compute_inputs(proj, resolve_platform(proj), "uv").entries]
    assert {f"{REQ}/vendor/deeper/note.txt", f"{REQ}/vendor/kdtiny_beta-3.0-py3-none-any.whl"} <= set(keys)


def test_a_file_url_index_of_the_project_is_an_input(tmp_path: Path) -> None:
    root = _vendor(tmp_path / "a")
    (root / REQ / "base.in").write_text(f"--index-url {(root / REQ / 'vendor').as_uri()}\nkdtiny-alpha\n",
                                        encoding="utf-8")
    before = _digest(root)
    (root / REQ / "vendor" / "deeper" / "note.txt").write_text("changed\n", encoding="utf-8")
    assert _digest(root) != before


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_a_wheel_removed_from_or_changed_in_the_folder_makes_the_lock_stale_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    offline_sources(monkeypatch, tiny_wheels(tmp_path / "wheels"), tmp_path / "cache")
    root = tiny_project(tmp_path / "p", base="--find-links vendor\nkdtiny-alpha\n")
    vendor = root / REQ / "vendor"
    vendor.mkdir()
    wheel = write_wheel(vendor, "kdtiny-beta", "1.0")  # this machine's sources hold the same bytes
    proj = load_project(root)
    lock_compile.compile_lock(proj, resolve_platform(proj), resolver=resolver)
    assert _check(root) == []
    data = wheel.read_bytes()
    wheel.write_bytes(data + b"\0")
    assert _check(root) == [f"{REQ}/vendor/{wheel.name} (in the folder {REQ}/vendor that {REQ}/base.in:1 names by "
                            "--find-links) changed"]
    wheel.unlink()
    assert _check(root) == [f"{REQ}/vendor/{wheel.name} (in the folder {REQ}/vendor that {REQ}/base.in:1 names by "
                            "--find-links) is no longer an input"]
    wheel.write_bytes(data)
    assert _check(root) == []  # control: put back, current again


@pytest.mark.parametrize("how", ["relative", "absolute", "file-url", "home"])
def test_a_local_source_outside_the_project_is_refused_naming_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    outside = tmp_path / "home" / "wheels"
    outside.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    value = {"relative": "../../home/wheels", "absolute": str(outside), "file-url": outside.as_uri(),
             "home": "~/wheels"}[how]
    root = tiny_project(tmp_path / "p", base=f"# vendored\n-f {value}\nkdtiny-alpha\n")
    proj = load_project(root)
    with pytest.raises(ConfigError, match=f"{REQ}/base.in:2: .* names a folder outside the project") as caught:
        compute_inputs(proj, resolve_platform(proj), "uv")
    assert caught.value.tip and "into the project" in caught.value.tip
    assert str(outside) not in str(caught.value) or how in ("absolute", "file-url")


def test_a_local_source_that_does_not_exist_or_goes_through_a_variable_is_refused(tmp_path: Path) -> None:
    for line, said in (("--find-links vendor", "does not exist"), ("-f ${WHEELS}", "environment variable")):
        root = tiny_project(tmp_path / line.split()[-1].strip("${}"), base=f"{line}\nkdtiny-alpha\n")
        proj = load_project(root)
        with pytest.raises(ConfigError, match=f"{REQ}/base.in:1: .*{said}"):
            compute_inputs(proj, resolve_platform(proj), "uv")


@pytest.mark.parametrize("line", ["--index-url .", "--extra-index-url ..", "-i ./"])
def test_the_project_s_own_folder_as_an_index_is_refused(tmp_path: Path, line: str) -> None:
    """An index is read at any depth: the project's root as one would make every file of it (.git, the envs, the
    runs) an input. Control: the same folder as a find-links folder (its direct entries) is an input."""
    root = tiny_project(tmp_path / "p", base=f"{line}\nkdtiny-alpha\n")
    proj = load_project(root)
    with pytest.raises(ConfigError, match=f"{REQ}/base.in:1: .* names the project's own folder as a package index"):
        compute_inputs(proj, resolve_platform(proj), "uv")
    (root / REQ / "base.in").write_text("--find-links .\nkdtiny-alpha\n", encoding="utf-8")
    keys = [key for key, _ in compute_inputs(proj, resolve_platform(proj), "uv").entries]
    assert "pyproject.toml" in keys and not any(key.startswith(f"{REQ}/") and key.count("/") > 1 for key in keys)


def test_remote_sources_stay_the_resolvers_and_keep_the_digest(tmp_path: Path) -> None:
    """Control: an https index or find-links page is no input (as before), so the digest is what it was."""
    remote = tiny_project(tmp_path / "b", base="kdtiny-alpha\n")
    proj = load_project(remote)
    keys = [key for key, _ in compute_inputs(proj, resolve_platform(proj), "uv").entries]
    (remote / REQ / "base.in").write_text("-i https://example.com/simple\n--find-links https://example.com/links\n"
                                          "kdtiny-alpha\n", encoding="utf-8")
    assert [key for key, _ in compute_inputs(proj, resolve_platform(proj), "uv").entries] == keys
