"""What the application leaves set for the interpreter to call later, and a window's end putting it back
(kernodeck/inenv/leftover.py; red-team passes 39-43): the interpreter's hooks kept around a test, a hook set inside a
window as world.window sees it, and the application's stand-ins that record their calls in CALLS.

A test module that builds ``types.FunctionType(textwrap.wrap.__code__, globals())`` imports TextWrapper by name: the
library's code then finds the application's class in that module's globals."""

from __future__ import annotations

import contextlib
import gc
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

from kernodeck.inenv import leftover

CALLS: list[Any] = []  # each call of the application's stand-ins, emptied as a test starts (kept_hooks)


class TextWrapper:
    """The application's class under the name ``textwrap.wrap``'s code looks up in its globals."""

    def __init__(self, **kwargs: Any) -> None:
        CALLS.append(kwargs)

    def wrap(self, text: Any) -> list[str]:
        CALLS.append(text)
        return []


@contextlib.contextmanager
def kept_hooks(*, imports: bool = False) -> Iterator[None]:
    """sys.excepthook, sys.unraisablehook, gc.callbacks and textwrap.TextWrapper as they were, whatever the block
    leaves, CALLS emptied first. With ``imports``, sys.path as it was too, and every name the block added to
    sys.modules removed (only for a block that registers modules of its own: another's imports stay)."""
    saved = (sys.excepthook, sys.unraisablehook, list(gc.callbacks), textwrap.TextWrapper)
    path, modules = list(sys.path), set(sys.modules)
    CALLS.clear()
    try:
        yield
    finally:
        sys.excepthook, sys.unraisablehook = saved[:2]
        gc.callbacks[:] = saved[2]
        textwrap.TextWrapper = saved[3]  # type: ignore[misc]
        if imports:
            sys.path[:] = path
            for name in set(sys.modules) - modules:
                del sys.modules[name]


def left(hook: Any, *, as_excepthook: bool = False) -> Any:
    """``hook`` set as a gc callback inside a window (leftover.taken at its start, put_back at its end, as
    world.window does), and with ``as_excepthook`` as sys.excepthook and sys.unraisablehook too: ``hook`` itself."""
    before = leftover.taken()
    if as_excepthook:
        sys.excepthook = hook
        sys.unraisablehook = hook
    gc.callbacks.append(hook)
    leftover.put_back(before)
    return hook
