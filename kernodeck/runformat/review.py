"""What a dossier says, made fit to share: ``procedure.md`` (how to replay the run), and the review every text file of
a dossier passes before it is put in place.

The review strips URL credentials, replaces this machine's package sources and home/project paths by placeholders,
then scans each file for the values of every source and credential variable: one left fails the write.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kernodeck.errors import KernodeckError
from kernodeck.sources import SecretInText, Secrets, check_written, scrub_text

# The rebuilt env's folder as procedure.md names it (relative to the project).
VENV = ".venv-rebuild"

CREDENTIALS_HELP = """## Credentials and package sources

Nothing here holds a credential or this machine's package sources. The variant's declared public index is named in
the commands above; a mirror of it (`KERNODECK_INDEX_<VARIANT>`, e.g. `KERNODECK_INDEX_CPU`) is named by its
variable only. To install from a private index or a mirror, provide it at install time only, through the installer's
own settings:

- pip: `PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS`, or a pip.conf / keyring / `~/.netrc` entry;
- uv: `UV_DEFAULT_INDEX`, `UV_INDEX`, `UV_FIND_LINKS`, or `UV_INDEX_<NAME>_USERNAME` / `_PASSWORD`.

The lock's hashes still decide what is accepted, whatever the source.
"""

_BINARY = (".npy", ".pt", ".safetensors")


def _public(root: Path) -> list[str]:
    """The project's declared indexes: public, committed in pyproject.toml, so they may be named."""
    from kernodeck.project.config import load_project

    try:
        return [v.index for v in load_project(root).variants.values()]
    except KernodeckError:
        return []



@dataclass(frozen=True)
class Reviewer:
    """Makes text fit to share: no credential, no source of this machine (its values read from pip's files and the
    environment, no pip needed), no home or project path."""

    public: tuple[str, ...]  # the project's declared indexes: public, so they may be named
    replacements: tuple[tuple[str, str], ...]  # (path, placeholder), longest path first
    secrets: Secrets | None = None  # read once by the caller; None: read at each call

    def __call__(self, text: str) -> str:
        text = scrub_text(text, self.public, secrets=self.secrets)
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text


def reviewer(root: Path, secrets: Secrets | None = None, *, public: Iterable[str] | None = None) -> Reviewer:
    """The reviewer of a dossier of the project at ``root`` (``secrets``: the machine's sources, when already read;
    ``public``: the project's declared indexes, when its pyproject.toml is already read)."""
    replacements: list[tuple[str, str]] = [(str(root), "<project>")]
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        replacements.append((home, "~"))
    replacements.sort(key=lambda pair: -len(pair[0]))
    return Reviewer(tuple(_public(root) if public is None else public), tuple(replacements), secrets)


def review_folder(
    folder: Path,
    root: Path,
    review: Callable[[str], str] | None = None,
    *,
    secrets: Secrets | None = None,
    public: Iterable[str] | None = None,
    reviewed: Iterable[str] = (),
) -> None:
    """Rewrite every text file under ``folder`` through the reviewer (binary outputs are left as they are), then
    scan each for the values of every source and credential variable: one left fails the write (and the file is
    removed: it is Kernodeck's own, in a folder not yet in place). ``secrets`` and ``public`` (the project's declared
    indexes): as the caller already read them (a verify's run context); else read here. ``reviewed``: the files
    (relative to ``folder``) the caller wrote from text that already passed this review and check
    (:func:`reviewed_text`)."""
    review = review or reviewer(root, secrets, public=public)
    if isinstance(review, Reviewer):
        public = review.public
    elif public is None:
        public = tuple(_public(root))
    if secrets is None and isinstance(review, Reviewer):
        secrets = review.secrets
    done = set(reviewed)
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix in _BINARY or str(path.relative_to(folder)) in done:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        reviewed = review(text)
        if reviewed != text:
            path.write_text(reviewed, encoding="utf-8")
        try:
            check_written(reviewed, str(path.relative_to(folder)), public, secrets=secrets)
        except SecretInText:
            path.unlink()
            raise


def pip_steps(lock_rel: str, index: str, *, venv: str = VENV) -> list[str]:
    """The commands that make the env with pip alone: a fresh venv, the hash-checked install of the lock (handed to
    pip as a file), pip's own consistency check. procedure.md and the container files both show exactly these."""
    return [
        f"python3 -m venv {venv}",
        " ".join([f"{venv}/bin/python -m pip install --require-hashes --no-deps", *([index] if index else []),
                  f"-r {shlex.quote(lock_rel)}"]),  # a lockfiles folder with a space stays one word
        f"{venv}/bin/python -m pip check",
    ]


def procedure(
    commands: list[str],
    runner_cmd: str,
    env_vars: dict[str, str],
    installer: str,
    lock_rel: str,
    platform_id: str,
    reused: bool,
    *,
    index_args: str = "",
    index_note: str = "",
    sources: tuple[str, ...] = (),
) -> str:
    """procedure.md: the commands this run executed, the same install with pip alone where uv installed, the checks'
    command line, and how to provide credentials (never recorded)."""
    lines = [
        "# Procedure",
        "",
        f"Platform `{platform_id}`. The exact commands this run executed, in order (paths relative to the project).",
        "Each one is replayable by hand with plain Python and pip; Kernodeck is not needed to replay.",
        "",
    ]
    if index_note:
        lines += ["Package sources: PyPI and the variant's index:", f"{index_note}.",
                  "The lock's hashes decide which file is accepted, whatever index serves it.", ""]
    if reused:
        lines += ["The environment was reused (same lock digest, same interpreter); it was built by:", ""]
    lines += ["```sh", *commands, "```", ""]
    if installer == "uv":
        lines += [
            "uv installed the packages. The same step with pip alone (what the seed procedure runs):",
            "",
            "```sh",
            *pip_steps(lock_rel, index_args),  # the same commands `nox -s export` puts in a container
            ".venv-rebuild/bin/python -m pip freeze --all > installed-after.txt",
            "```",
            "",
        ]
    if sources:  # project/assets.py: each declared weights or data source, its fetch command and its access
        lines += ["The weights and data, put where the checks find them before they run (a token is supplied by the",
                  "variable named, never recorded):", "", "```sh", *sources, "```", ""]
    shown_env = " ".join(f"{k}={v}" for k, v in sorted(env_vars.items()))
    lines += [
        "Then the checks, in one process, by the environment's explicit interpreter, from the project root",
        "(DOSSIER is this folder; run-config.json in it names the steps and the declared tolerance), in a shell with",
        "no PYTHON* variable set but those shown (`-s -P` is `-I` without `-E`, which would ignore PYTHONHASHSEED):",
        "",
        "```sh",
        f"{shown_env} {runner_cmd}",
        "```",
        "",
        CREDENTIALS_HELP,
    ]
    return "\n".join(lines)



def reviewed_text(text: str, name: str, review: Reviewer) -> str:
    """``text`` as :func:`review_folder` would leave the file ``name``: reviewed, then checked (SecretInText)."""
    out = review(text)
    check_written(out, name, review.public, secrets=review.secrets)
    return out
