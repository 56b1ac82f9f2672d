"""Run ``python -m kernodeck ARGS`` in this process, counting every file it opens for reading.

``python tests/helpers/readcount.py COUNTS.json [--twice MODULE:FUNCTION | --reread MODULE:FUNCTION PATH] -- ARGS``
(in the project folder): a
``sys.addaudithook`` hook sees every ``open`` (``open()``, ``Path.read_text``, ``os.open``) of every thread. Written to
COUNTS.json when the command ends: ``{path: {who: count}}`` for every file opened for reading that is not Python
source, ``who`` being the Kernodeck functions on the stack at that open (``module:function``, innermost first).
``--twice`` wraps FUNCTION so each call runs it twice: the planted second read the counter must catch (the negative
control). ``--reread`` wraps FUNCTION so each call also reads PATH again: the plant for a file whose reader keeps one
parse per file state (calling that reader twice reads nothing).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections import Counter
from typing import Any

READS: dict[str, Counter[str]] = {}
PACKAGE = os.sep + "kernodeck" + os.sep


def _who() -> str:
    """The Kernodeck functions on the stack, innermost first (``kernodeck.lock.check:require_checked < ...``)."""
    names = []
    frame = sys._getframe(2)
    while frame is not None:
        file = frame.f_code.co_filename
        if PACKAGE in file and not file.endswith("readcount.py"):
            module = "kernodeck." + file.rsplit(PACKAGE, 1)[1].removesuffix(".py").replace(os.sep, ".")
            names.append(f"{module.removesuffix('.__init__')}:{frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return " < ".join(names)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open":
        return
    path, mode, flags = args
    if isinstance(path, int) or path is None:
        return  # an open file descriptor, not a path
    reading = ("r" in mode and "+" not in mode) if isinstance(mode, str) else (int(flags or 0) & os.O_ACCMODE) == 0
    name = os.path.abspath(os.fsdecode(path))
    if reading and not name.endswith((".py", ".pyc")):
        READS.setdefault(name, Counter())[_who()] += 1


def _plant(target: str, reread: str = "") -> None:
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    original = getattr(module, name)

    @functools.wraps(original)
    def twice(*args: Any, **kwargs: Any) -> Any:
        if reread:
            with open(reread, "rb") as handle:  # the planted second read of PATH, inside FUNCTION
                handle.read()
        else:
            original(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(module, name, twice)


def main(argv: list[str]) -> int:
    out, rest = argv[0], argv[1:]
    split = rest.index("--")
    options, args = rest[:split], rest[split + 1 :]
    if options[:1] == ["--twice"]:
        _plant(options[1])
    elif options[:1] == ["--reread"]:
        _plant(options[1], options[2])
    from kernodeck.__main__ import main as kernodeck_main

    sys.addaudithook(_hook)
    try:
        return kernodeck_main(args)
    finally:
        with open(out + ".tmp", "w", encoding="utf-8") as handle:  # a write: not counted
            json.dump({k: dict(v) for k, v in READS.items()}, handle, indent=1, sort_keys=True)
        os.replace(out + ".tmp", out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
