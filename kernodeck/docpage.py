"""The reference parts of the docs, generated from the code: in docs/sessions.md the sessions ``register()`` adds
(with their docstrings) and the repository's own, every command's options (from the argparse parsers, never their
error path) and the exit codes (:data:`kernodeck.exitcodes.MEANINGS`); in docs/locks.md the declared platforms and
their committed locks; in docs/claims.md verify's steps and the claims each establishes (the step tables' rows,
:data:`kernodeck.verify.claims.CLAIMS` and ``SKIPPABLE``); in docs/report.md the steps, the layers a failure of each
belongs to and what each checks (the rows); the tables of tolerance kinds in
docs/application.md, docs/verdict-rules.md and docs/calibration.md (:data:`kernodeck.inenv.kinds.KINDS`).

``python -m kernodeck.docpage`` rewrites the pages' generated blocks; ``--check`` exits 1 when they differ from
the code (tests/unit/test_docpage.py runs it).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from pathlib import Path

from kernodeck import noxsessions
from kernodeck._fs import write_atomic
from kernodeck.cli.dispatch import ORDER, build_parser
from kernodeck.exitcodes import MEANINGS
from kernodeck.inenv import steptable
from kernodeck.inenv.evidence import ClaimRow
from kernodeck.inenv.kinds import KINDS
from kernodeck.verify.claims import CLAIMS, SKIPPABLE
from kernodeck.verify.outside import OUTSIDE_STEPS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "sessions.md"
NOXFILE = ROOT / "noxfile.py"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def own_sessions(noxfile: Path = NOXFILE) -> list[tuple[str, str]]:
    """The sessions a noxfile defines itself (``@nox.session`` functions), with their docstrings, in file order."""
    found = []
    for node in ast.parse(noxfile.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and any("nox.session" in ast.unparse(d) for d in node.decorator_list):
            found.append((node.name, ast.get_docstring(node) or ""))
    return found


def sessions_block() -> str:
    lines = ["| session | what it does | run by a bare `nox` |", "|---|---|---|"]
    lines += [f"| `nox -s {s.name}` | {_cell(s.doc)} | {'yes' if s.default else 'no'} |" for s in noxsessions.SESSIONS]
    lines += ["", "Kernodeck's own repository adds these (its `noxfile.py`; `sbom` and `audit` run the commands of "
              "the same names):", "", "| session | what it does |", "|---|---|"]
    lines += [f"| `nox -s {name}` | {_cell(doc)} |" for name, doc in own_sessions()]
    return "\n".join(lines)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _argument(action: argparse.Action) -> str:
    if action.choices is not None:
        return "`" + "\\|".join(str(c) for c in action.choices) + "`"
    if action.nargs == 0:
        return ""
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"`{metavar}`" + (" …" if action.nargs in ("+", "*") else "")


def _row(action: argparse.Action) -> str:
    name = ", ".join(f"`{o}`" for o in action.option_strings) or _argument(action)
    argument = _argument(action) if action.option_strings else ""
    default = action.default
    shown = "" if default in (None, False, [], "", argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    needed = " (required)" if action.required and action.option_strings else ""
    return f"| {name} | {argument} | {shown} | {_cell(action.help or '')}{needed} |"


class _Fixed(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=116)


def options_block() -> str:
    parser = build_parser()
    top = _subparsers(parser)
    chooser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in chooser._choices_actions}
    lines = ["`kernodeck --version` prints the version. Each command below is `python -m kernodeck COMMAND …` and "
             "`nox -s COMMAND -- …` alike.", ""]
    for name in ORDER:
        sub = top[name]
        sub.formatter_class = _Fixed  # the usage wrapped the same on every terminal
        lines += [f"### `{name}`", "", _cell(helps.get(name) or ""), "", "```", sub.format_usage().strip(), "```", ""]
        actions = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if actions:
            lines += ["| option | argument | default | what |", "|---|---|---|---|", *map(_row, actions), ""]
    return "\n".join(lines).rstrip()


def exit_codes_block() -> str:
    lines = ["| exit | meaning | where |", "|---|---|---|"]
    lines += [f"| {int(m.code)} | {_cell(m.meaning)} | {_cell(m.who)} |" for m in MEANINGS]
    return "\n".join(lines)


def platforms_block(root: Path = ROOT) -> str:
    """Every declared platform of this repository's pyproject.toml, its lock as committed (resolver from its header)."""
    from kernodeck.lock import lockfile
    from kernodeck.project.config import load_project

    project = load_project(root)
    lines = ["| platform | lock | resolver | CI runner |", "|---|---|---|---|"]
    for plat in project.platforms:
        path = project.lockfiles / f"{plat.id}.txt"
        if path.is_file():
            state = f"committed (`lockfiles/{path.name}` + PEP 751 twin)"
            resolver = lockfile.read(path).first("resolver")
        else:
            state = "`lock-on-runner`: made on its runner" if plat.lock_on_runner else "MISSING"
            resolver = ""
        lines.append(f"| `{plat.id}` | {state} | {resolver} | `{plat.runner or 'none'}` |")
    return "\n".join(lines)


def steps_claims_block() -> str:
    """Verify's steps in the order they run, each with the claims it establishes (THE step -> claim table)."""
    outside = [(r.name, f"outside the env: `kernodeck/verify/steps/{r.module}.py`") for r in OUTSIDE_STEPS]
    steps = outside + [(str(r.name), f"inside the env (one process): `kernodeck/inenv/{r.module}.py`")
                       for r in steptable.STEPS]
    steps += [(c.step, "no such step in the run") for c in CLAIMS if c.step not in {n for n, _ in steps}]
    lines = ["| step | runs | claims it establishes: id, what, its evidence (the step's `details` key), in | "
             "skipped in a pass |", "|---|---|---|---|"]
    for name, runs in dict(steps).items():
        specs = [c for c in CLAIMS if c.step == name]
        claims = "; ".join(f"`{c.id}`: {_cell(c.text)} (`{c.key}`; {', '.join(sorted(c.modes, reverse=True))})"
                           for c in specs) or "none"
        lines.append(f"| `{name}` | {runs} | {claims} | {_skip(name, specs)} |")
    return "\n".join(lines)


def _skip(name: str, specs: list[ClaimRow]) -> str:
    """Whether a pass may skip the step, in each mode: only a step in SKIPPABLE that no claim of the mode rests on."""
    modes = ("verify", "reference")
    allowed = [m for m in modes if name in SKIPPABLE and not any(m in c.modes for c in specs)]
    if len(allowed) == len(modes):
        return "allowed"
    if allowed:
        others = ", ".join(m for m in modes if m not in allowed)
        return f"allowed in {', '.join(allowed)}; in {others} its claims are then `step-skipped`"
    return "no: its claims are then `step-skipped`" if specs else "no: the verdict fails"


def steps_block() -> str:
    """Verify's steps in the order they run: where a failure of each belongs, what each checks (the rows' own words)."""
    lines = ["| step | layer on failure | what it checks (it passes when) |", "|---|---|---|"]
    rows = [(r.name, str(r.layer), r.checks) for r in OUTSIDE_STEPS]
    rows += [(r.name, " / ".join(r.layers), r.checks) for r in steptable.STEPS]
    lines += [f"| `{name}` |{f' {layers} ' if layers else ' '}| {_cell(checks)} |" for name, layers, checks in rows]
    return "\n".join(lines)


def pipeline_block() -> str:
    """The pipeline's entries in the order they run, each with the steps it reports (the rows' modules; a list item's
    table: indented)."""
    lines = ["| entry | step(s) it reports |", "|---|---|"]
    lines += [f"| `verify/steps/{r.module}.py` | `{r.name}`{' (shown only when it fails)' if r.quiet else ''} |"
              for r in OUTSIDE_STEPS]
    inside = [str(r.name) for r in steptable.STEPS]
    lines.append(f"| `verify/steps/in_env.py` | every in-env step, in ONE process inside the env: "
                 f"{', '.join(f'`{n}`' for n in inside)} |")
    return "\n".join(f"   {line}" for line in lines)  # in a numbered list item


def kinds_block() -> str:
    """The tolerance kinds (kernodeck/inenv/kinds.py): when an output passes, and what for."""
    lines = ["| kind | passes when | for |", "|---|---|---|"]
    lines += [f"| `{name}` | {_cell(kind.DOC)} | {_cell(kind.USE)} |" for name, kind in KINDS.items()]
    return "\n".join(lines)


def kinds_moved_block() -> str:
    """Each kind's controls: the reference moved just past each bound (a list item's table: indented)."""
    lines = ["| kind | moved past it |", "|---|---|"]
    for name, kind in KINDS.items():
        for key, how in kind.MOVED.items():
            label = f"`{name}`, `{key}`" if len(kind.MOVED) > 1 else f"`{name}`"
            lines.append(f"| {label} | {_cell(how)} |")
    return "\n".join(f"  {line}" for line in lines)


def kinds_measured_block() -> str:
    """The numbers calibrate and drift measure of each kind, and the declared bound in their units."""
    lines = ["| kind | numbers (each a distance: 0 means equal) | declared bound in the same units |", "|---|---|---|"]
    lines += [f"| `{name}` | {_cell(kind.MEASURED[0])} | {_cell(kind.MEASURED[1])} |" for name, kind in KINDS.items()]
    return "\n".join(lines)


# page -> its generated blocks
PAGES: dict[Path, dict[str, Callable[[], str]]] = {
    PAGE: {"sessions": sessions_block, "options": options_block, "exit-codes": exit_codes_block},
    ROOT / "docs" / "locks.md": {"platforms": platforms_block},
    ROOT / "docs" / "claims.md": {"steps-claims": steps_claims_block},
    ROOT / "docs" / "report.md": {"steps": steps_block},
    ROOT / "docs" / "verify-pipeline.md": {"pipeline": pipeline_block},
    ROOT / "docs" / "application.md": {"kinds": kinds_block},
    ROOT / "docs" / "verdict-rules.md": {"kinds-moved": kinds_moved_block},
    ROOT / "docs" / "calibration.md": {"kinds-measured": kinds_measured_block},
}
BLOCKS = PAGES[PAGE]


def render(text: str, blocks: dict[str, Callable[[], str]] | None = None, name_: str = PAGE.name) -> str:
    """``text`` with each generated block (between its ``<!-- generated:NAME -->`` markers) written from the code."""
    for name, make in (BLOCKS if blocks is None else blocks).items():
        begin, end = f"<!-- generated:{name} (python -m kernodeck.docpage) -->", f"<!-- /generated:{name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"{name_} lacks the markers of its generated block {name!r}: {begin} … {end}")
        head, rest = text.split(begin, 1)
        indent = head[head.rfind("\n") + 1 :]  # a block inside a list item keeps its end marker indented too
        text = f"{head}{begin}\n{make()}\n{indent if not indent.strip() else ''}{end}{rest.split(end, 1)[1]}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernodeck.docpage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs from the code")
    args = parser.parse_args(argv)
    differ = []
    for page, blocks in PAGES.items():
        current = page.read_text(encoding="utf-8")
        wanted = render(current, blocks, page.name)
        if wanted == current:
            continue
        differ.append(str(page.relative_to(ROOT)))
        if not args.check:
            write_atomic(page, wanted)
            print(f"wrote {page.relative_to(ROOT)}")
    if args.check and differ:
        print(f"{', '.join(differ)} differ from the code; run: python -m kernodeck.docpage", file=sys.stderr)
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
