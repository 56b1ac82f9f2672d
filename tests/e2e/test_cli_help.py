"""Help texts: plain text (no RST or Markdown markup), every option explained, named metavars, --version."""

from __future__ import annotations

import argparse
import re

import pytest

from kernodeck import __version__
from kernodeck.cli.dispatch import build_parser
from tests.helpers.project import ROOT, kd

MARKUP = re.compile(r"``|`[^`\s]+`|:(?:class|func|mod|meth):|\*\*")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Options and arguments of a parser with no help text, and help texts that carry markup."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            found.append(f"{name}: no help")
        elif MARKUP.search(action.help):
            found.append(f"{name}: markup in {action.help!r}")
    for text in (parser.description or "", parser.epilog or ""):
        if MARKUP.search(text):
            found.append(f"{parser.prog}: markup in {text!r}")
    return found


def test_every_option_of_every_command_is_explained_without_markup() -> None:
    parser = build_parser()
    problems = undocumented(parser)
    for name, sub in subparsers(parser).items():
        problems += [f"{name} {p}" for p in undocumented(sub)]
    assert problems == []


def test_the_checker_finds_a_bare_option_and_markup() -> None:
    parser = argparse.ArgumentParser(prog="x", description="see ``python -m x``")
    parser.add_argument("--bare")
    parser.add_argument("--marked", help="the `thing`")
    assert undocumented(parser) == [
        "--bare: no help",
        "--marked: markup in 'the `thing`'",
        "x: markup in 'see ``python -m x``'",
    ]


def test_compare_names_its_two_dossiers() -> None:
    usage = subparsers(build_parser())["compare"].format_usage()
    assert usage.strip().endswith("A B") and "dirs" not in usage


@pytest.mark.parametrize("args", [["--help"], ["verify", "--help"], ["compare", "--help"], ["lock", "--help"]])
def test_help_as_printed_has_no_markup(args: list[str]) -> None:
    proc = kd(ROOT, *args, env={"PATH": ""})  # help reads and writes nothing
    assert proc.returncode == 0 and proc.stdout.startswith("usage: kernodeck")
    assert not MARKUP.search(proc.stdout), proc.stdout


def test_version() -> None:
    proc = kd(ROOT, "--version", env={"PATH": ""})
    assert proc.returncode == 0 and proc.stdout.strip() == f"kernodeck {__version__}"


def test_nox_session_help_has_no_markup() -> None:
    """What `nox --list` shows: the API's session docs and this repository's own session docstrings."""
    from kernodeck import noxsessions

    docs = [spec.doc for spec in noxsessions.SESSIONS]
    text = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    docs += re.findall(r'@nox.session[^\n]*\ndef \w+\([^)]*\)[^\n]*\n\s+"""(.*?)"""', text, flags=re.S)
    assert len(docs) > len(noxsessions.SESSIONS)
    assert [d for d in docs if MARKUP.search(d)] == []


# A command line argparse refuses: one ERROR line naming the command, one TIP naming its help, exit 2; never the
# usage text argparse prints by itself.
REFUSED = [
    (["verify", "--bogus"], "ERROR: kernodeck verify: unrecognized arguments: --bogus", "TIP: nox -s verify -- --help"),
    (["verify", "--expect-backend", "tpu"], "ERROR: kernodeck verify: argument --expect-backend: invalid choice: "
     "'tpu'", "TIP: nox -s verify -- --help"),
    (["reference", "--out"], "ERROR: kernodeck reference: argument --out: expected one argument",
     "TIP: nox -s reference -- --help"),
    (["nope"], "ERROR: kernodeck: argument COMMAND: invalid choice: 'nope'", "TIP: python -m kernodeck --help"),
    ([], "ERROR: kernodeck: the following arguments are required: COMMAND", "TIP: python -m kernodeck --help"),
    (["init", "--bogus"], "ERROR: kernodeck init: unrecognized arguments: --bogus",
     "TIP: python -m kernodeck init --help"),
]


@pytest.mark.parametrize(("args", "error", "tip"), REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_refused_command_line_is_one_error_and_a_tip(
    args: list[str], error: str, tip: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kernodeck.__main__ import main

    assert main(args) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2, err
    assert lines[0].startswith(error) and lines[1] == tip, err
    assert "usage:" not in err


def test_a_refused_option_through_the_real_command_is_one_error_and_a_tip() -> None:
    """What a user runs (and what nox -s verify -- --bogus runs): rc 2, no usage text, nothing read or run."""
    proc = kd(ROOT, "verify", "--bogus", env={"PATH": ""})
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [
        "ERROR: kernodeck verify: unrecognized arguments: --bogus", "TIP: nox -s verify -- --help"]


def test_argparse_alone_would_print_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """The control: a plain parser with the same option exits through SystemExit with the usage text, which the
    boundary above replaces; and the parser still takes a valid choice."""
    from kernodeck.cli.dispatch import parse

    plain = argparse.ArgumentParser(prog="kernodeck verify")
    plain.add_argument("--expect-backend", choices=["cpu", "cuda"])
    with pytest.raises(SystemExit):
        plain.parse_args(["--expect-backend", "tpu"])
    assert "usage: kernodeck verify" in capsys.readouterr().err
    assert parse(["verify", "--expect-backend", "cuda"]).expect_backend == "cuda"
