"""Fault injection for the tests, never in the shipped checks: the test edits a COPY of the project's check file.

``inject(project, "application", CODE)`` appends CODE to the copy's ``kernodeck/inenv/application.py`` (the in-env
steps; ``"app"`` is the project's own ``checks/app.py``, ``"tiny/app"`` the tiny application's). It runs when the runner
imports the module, after the module's own definitions, so it can wrap a step function by name; the runner looks each
step up at call time and so calls the wrapper. The shipped files, and any other project, are untouched.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

MARK = "# --- fault injected by a test (tests/helpers/faults.py) ---"


def check_file(project: Path, module: str) -> Path:
    """The copy's file of the in-env module ``module`` (e.g. "application"), or of the project's app (``"app"``)."""
    path = project / "kernodeck" / "inenv" / f"{module}.py"
    if not path.is_file():
        path = project / "checks" / f"{module}.py"
    if not path.is_file() and "/" in module:  # a project file by its path, e.g. "tiny/app" (tests/helpers/tinyapp.py)
        path = project / f"{module}.py"
    assert path.is_file(), f"no check module {module!r} at {path}"
    return path


def inject(project: Path, module: str, code: str) -> None:
    path = check_file(project, module)
    text = path.read_text(encoding="utf-8")
    assert MARK not in text, "one injection per copy"
    path.write_text(f"{text}\n\n{MARK}\n{textwrap.dedent(code).strip()}\n", encoding="utf-8")


def wrap_after(function: str, body: str) -> str:
    """Code that replaces ``function(*args)`` by: call the original, then run BODY (args and result in scope)."""
    return (
        f"_injected_{function} = {function}\n\n\n"
        f"def {function}(*args, **kwargs):\n"
        f"    result = _injected_{function}(*args, **kwargs)\n"
        f"{textwrap.indent(textwrap.dedent(body).strip(), '    ')}\n"
        f"    return result\n"
    )


def wrap_around(function: str, setup: str, teardown: str) -> str:
    """Code that replaces ``function(ctx)`` by: SETUP, the original, then TEARDOWN (always)."""
    return (
        f"_injected_{function} = {function}\n\n\n"
        f"def {function}(ctx):\n"
        f"{textwrap.indent(textwrap.dedent(setup).strip(), '    ')}\n"
        f"    try:\n"
        f"        return _injected_{function}(ctx)\n"
        f"    finally:\n"
        f"{textwrap.indent(textwrap.dedent(teardown).strip(), '        ')}\n"
    )


# The faults the reliability suite uses, by name: (module, code appended), each on the application's output OUTPUT
# (a float array of two dimensions: the MiniLM embeddings, the tiny application's logits).
_OUTPUT_FAULTS = {
    # a NaN from the model, as the reread step must catch it
    "nan-output": """
        _arr = _np().load(args[0].outputs / "OUTPUT.npy")
        _arr[3, 1] = float("nan")
        _save_npy(args[0].outputs / "OUTPUT.npy", _arr)
        """,
    # ids written out of order
    "reverse-ids": """
        _ids = json.loads((args[0].outputs / "OUTPUT.ids.json").read_text(encoding="utf-8"))
        (args[0].outputs / "OUTPUT.ids.json").write_text(json.dumps(_ids[::-1]) + "\\n", encoding="utf-8")
        """,
    # the output file truncated between write and reread
    "truncate-output": """
        _path = args[0].outputs / "OUTPUT.npy"
        _path.write_bytes(_path.read_bytes()[: _path.stat().st_size // 2])
        """,
}
OUTPUT_FAULTS = tuple(_OUTPUT_FAULTS)


def output_fault(fault: str, output: str) -> tuple[str, str]:
    """The fault ``fault`` (one of OUTPUT_FAULTS) on the output ``output``, for :func:`inject`."""
    return "application", wrap_after("run_entry", _OUTPUT_FAULTS[fault].replace("OUTPUT", output))


BACKEND_FAULTS = {
    # every tensor sent to a device this CPU build cannot reach: torch's own error at the transfer
    "transfer": (
        "backend",
        wrap_around(
            "run",
            """
            import torch
            _to = torch.Tensor.to
            torch.Tensor.to = lambda self, *a, **k: _to(self, "cuda:7")
            """,
            "torch.Tensor.to = _to",
        ),
    ),
    # the matmul called with shapes it rejects: torch's own error in the operator
    "operator": (
        "backend",
        wrap_around(
            "run",
            """
            import torch
            _matmul = torch.Tensor.__matmul__
            torch.Tensor.__matmul__ = lambda self, other: _matmul(self, self)
            """,
            "torch.Tensor.__matmul__ = _matmul",
        ),
    ),
}
