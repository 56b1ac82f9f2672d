"""Each path export writes reads back as itself in each file (kernodeck/dossier/copylines.py), read by the files' own
readers' rules (tests/helpers/containerfiles.py), or is refused with one ERROR line and a TIP; the old bare forms
split or mismatch the same paths (the negative controls)."""

from __future__ import annotations

import pytest

from kernodeck.dossier import copylines
from kernodeck.errors import ConfigError
from tests.helpers.containerfiles import (
    apptainer_files,
    copy_lines,
    dockerignore_sends,
    glob_literal,
    shell_form_copy,
    shell_word,
)

# Every path here is one a declaration may hold; each file writes all of them but where a row says it refuses.
PATHS = ["my data/labels #1.txt", "data[1].csv", "a*b?c/[x]", "it's $HOME \"q\"", "back\\slash", "-dash", " lead",
         "trail ", "re^g(e)x+{1}|.$", "é ü/ñ", "plain/file.txt", "~home", "50% off"]
APPTAINER_REFUSES = {"it's $HOME \"q\"", "back\\slash", "50% off"}


@pytest.mark.parametrize("path", PATHS)
def test_a_copy_line_reads_back_as_the_path(path: str) -> None:
    line = copylines.docker_copy(path, f"/project/{path}")
    assert copy_lines(line) == [(path, f"/project/{path}")]


@pytest.mark.parametrize("path", PATHS)
def test_the_ignore_file_sends_the_path_and_nothing_beside_it(path: str) -> None:
    """``*`` then the path's exception: the path and what is under it are sent; a near miss (what a glob or a trimmed
    space would also have matched) is not."""
    text = "*\n" + copylines.dockerignore_allow(path) + "\n"
    assert dockerignore_sends(text, path) and dockerignore_sends(text, f"{path}/inner")
    near = {path.strip(), path.replace("[", "").replace("]", ""), path.replace("*", "Z").replace("?", "Z"),
            path.replace("(", "").replace(")", ""), path + "x", path.replace(".", "Z")} - {path}
    assert not any(dockerignore_sends(text, other) for other in near if other), near


@pytest.mark.parametrize("path", [p for p in PATHS if p not in APPTAINER_REFUSES])
def test_a_files_line_reads_back_as_the_path(path: str) -> None:
    line = copylines.apptainer_files(path, f"/project/{path}")
    src = path if not path.startswith("-") else f"./{path}"
    assert apptainer_files(f"%files\n    {line}\n\n%post\n") == [(src, f"/project/{path}")]


@pytest.mark.parametrize("path", [*sorted(APPTAINER_REFUSES), "x {{ name }}"])
def test_apptainer_refuses_a_path_it_has_no_form_for(path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        copylines.apptainer_files(path, f"/project/{path}")
    message = str(caught.value)
    assert repr(path) in message and "Apptainer" in message and "\n" not in message
    assert caught.value.tip == "nox -s export -- --format apptainer --out runs/export"


@pytest.mark.parametrize("write", [lambda p: copylines.docker_copy(p, "/project/x"), copylines.dockerignore_allow,
                                   lambda p: copylines.apptainer_files(p, "/project/x")],
                         ids=["COPY", "dockerignore", "%files"])
def test_a_line_break_is_refused_in_every_file(write: object) -> None:
    assert callable(write)
    with pytest.raises(ConfigError) as caught:
        write("two\nlines")
    assert "'two\\nlines'" in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.tip.startswith("nox -s export -- --format ")
    write("two lines")  # control: a space has a form


def test_plain_paths_are_written_as_they_are() -> None:
    """The control: an ordinary project's files stay as they were (and BuildKit keeps walking its context by
    prefix: no exception holds a pattern character)."""
    assert copylines.docker_copy("dossier/reference", "/project/dossier/reference") == \
        'COPY ["dossier/reference", "/project/dossier/reference"]'
    assert copylines.dockerignore_allow("pyproject.toml") == "!pyproject.toml"
    assert copylines.apptainer_files("checks", "/project/checks") == "checks /project/checks"


@pytest.mark.parametrize("path", ["my data/labels #1.txt", "data[1].csv"])
def test_the_old_bare_lines_lose_the_path(path: str) -> None:
    """Negative controls: the shell-form COPY splits a space into more words and reads a ``[`` as a class (another
    file); the bare dockerignore line reads the ``[`` as a class too (sending another name and not this one); the bare
    %files line splits at the space."""
    old_copy = f"COPY {path} /project/{path}"
    with pytest.raises(ValueError):
        copy_lines(old_copy)  # no JSON array
    old_ignore = f"*\n!{path}\n"
    old_files = f"%files\n    {path} /project/{path}\n\n%post\n"
    if " " in path:
        assert shell_form_copy(old_copy) != [path, f"/project/{path}"]
        assert apptainer_files(old_files)[0] != (path, f"/project/{path}")
    else:
        assert not dockerignore_sends(old_ignore, path) and dockerignore_sends(old_ignore, "data1.csv")
        assert glob_literal(shell_form_copy(old_copy)[0]) == "data1.csv"  # the old source names another file


def test_the_readers_see_what_they_must() -> None:
    """The helpers' own controls: a glob matches more than one name; a bare ``$`` is a variable."""
    with pytest.raises(ValueError):
        glob_literal("a*")
    with pytest.raises(ValueError):
        shell_word("$HOME")
    assert glob_literal("a[[]1]") == "a[1]" and shell_word("a\\$b") == "a$b"
