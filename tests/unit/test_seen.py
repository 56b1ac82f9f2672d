"""The closed world's audit hook returns at once for an event it does not judge (kernodeck/inenv/seen.py ``JUDGED``):
every event a branch of ``_hook`` judges must be in that set, or the branch would never run. Read from the source
(the branches' names) and shown by behaviour (every audit event CPython raises, red-team pass 83's HOOK0)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

import pytest

from kernodeck.inenv import channels, children, declared_files, paths, seen


def _branch_events(source: str) -> set[str]:
    """The event names ``_hook``'s branches compare ``event`` with: ``event == "x"``, ``event in ("x", ...)`` and
    ``event in channels.NAME``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "event"):
            continue
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
                found.add(right.value)
            elif isinstance(op, ast.In) and isinstance(right, ast.Tuple):
                found |= {element.value for element in right.elts if isinstance(element, ast.Constant)}
            elif isinstance(op, ast.In) and isinstance(right, ast.Attribute):
                found |= set(getattr(channels, right.attr))
    return found


def test_every_event_a_branch_judges_reaches_it() -> None:
    judged = _branch_events(inspect.getsource(seen._hook))
    assert {"open", "os.scandir", "compile", "subprocess.Popen", "socket.connect"} <= judged  # the walk finds them
    assert judged <= seen.JUDGED, sorted(judged - seen.JUDGED)


def test_a_branch_whose_event_is_not_listed_is_caught() -> None:
    """The control: a branch added for an event missing from JUDGED is named."""
    source = inspect.getsource(seen._hook) + '\n    if event == "os.new_event":\n        pass\n'
    assert sorted(_branch_events(source) - seen.JUDGED) == ["os.new_event"]


# CPython's audit events (3.11/3.12 table), with the names C code raises for calls whose names differ
EVENTS = (
    "array.__new__", "builtins.breakpoint", "builtins.id", "builtins.input", "builtins.input/result", "code.__new__",
    "compile", "cpython.PyInterpreterState_Clear", "cpython.PyInterpreterState_New", "cpython._PySys_ClearAuditHooks",
    "cpython.run_command", "cpython.run_file", "cpython.run_interactivehook", "cpython.run_module",
    "cpython.run_startup", "cpython.run_stdin", "ctypes.addressof", "ctypes.call_function", "ctypes.cdata",
    "ctypes.cdata/buffer", "ctypes.create_string_buffer", "ctypes.create_unicode_buffer", "ctypes.dlopen",
    "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.get_errno", "ctypes.get_last_error", "ctypes.set_errno",
    "ctypes.set_exception", "ctypes.set_last_error", "ctypes.string_at", "ctypes.wstring_at", "ensurepip.bootstrap",
    "exec", "fcntl.fcntl", "fcntl.flock", "fcntl.ioctl", "fcntl.lockf", "ftplib.connect", "ftplib.sendcmd",
    "function.__new__", "gc.get_objects", "gc.get_referents", "gc.get_referrers", "glob.glob", "glob.glob/2",
    "http.client.connect", "http.client.send", "imaplib.open", "imaplib.send", "import", "marshal.dumps",
    "marshal.load", "marshal.loads", "mmap.__new__", "msvcrt.get_osfhandle", "msvcrt.locking", "msvcrt.open_osfhandle",
    "nntplib.connect", "nntplib.putline", "object.__delattr__", "object.__getattr__", "object.__setattr__", "open",
    "os.add_dll_directory", "os.chdir", "os.chflags", "os.chmod", "os.chown", "os.exec", "os.fork", "os.forkpty",
    "os.fwalk", "os.getxattr", "os.kill", "os.killpg", "os.link", "os.listdir", "os.listdrives", "os.listmounts",
    "os.listvolumes", "os.listxattr", "os.lockf", "os.mkdir", "os.posix_spawn", "os.putenv", "os.remove",
    "os.removexattr", "os.rename", "os.rmdir", "os.scandir", "os.setxattr", "os.spawn", "os.startfile",
    "os.startfile/2", "os.symlink", "os.system", "os.truncate", "os.unsetenv", "os.utime", "os.walk",
    "pathlib.Path.glob", "pathlib.Path.rglob", "pdb.Pdb", "pickle.find_class", "poplib.connect", "poplib.putline",
    "pty.spawn",
    "resource.prlimit", "resource.setrlimit", "setopencodehook", "shutil.chown", "shutil.copyfile",
    "shutil.copymode", "shutil.copystat", "shutil.copytree", "shutil.make_archive", "shutil.move", "shutil.rmtree",
    "shutil.unpack_archive", "signal.pthread_kill", "smtplib.connect", "smtplib.send", "socket.__new__", "socket.bind",
    "socket.connect", "socket.getaddrinfo", "socket.gethostbyaddr", "socket.gethostbyname", "socket.gethostname",
    "socket.getnameinfo", "socket.getservbyname", "socket.getservbyport", "socket.sendmsg", "socket.sendto",
    "socket.sethostname", "sqlite3.connect", "sqlite3.connect/handle", "sqlite3.enable_load_extension",
    "sqlite3.load_extension", "subprocess.Popen", "sys._current_exceptions", "sys._current_frames", "sys._getframe",
    "sys._getframemodulename", "sys.addaudithook", "sys.excepthook", "sys.set_asyncgen_hooks_finalizer",
    "sys.set_asyncgen_hooks_firstiter", "sys.setprofile", "sys.settrace", "sys.unraisablehook", "syslog.closelog",
    "syslog.openlog", "syslog.setlogmask", "syslog.syslog", "telnetlib.Telnet.open", "telnetlib.Telnet.write",
    "tempfile.mkdtemp", "tempfile.mkstemp", "time.sleep", "urllib.Request", "webbrowser.open", "winreg.ConnectRegistry",
    "zipimport.zipimporter", channels.SPAWN_EVENT,
)
SHAPES: tuple[tuple[Any, ...], ...] = (("a", "b", "c", "d", "e"), (3, None, 0, -1, -1), ("/x", "r", 0), (0,), ())


class _Reached(Exception):
    pass


class _Every:
    def __contains__(self, _: object) -> bool:
        return True


def _branches(monkeypatch: pytest.MonkeyPatch, judged: Any) -> dict[str, list[str]]:
    """Which recorder each event (with each argument shape) reaches, ``seen.JUDGED`` being ``judged``."""

    def recorder(name: str) -> Any:
        def reached(*_: Any, **__: Any) -> None:
            raise _Reached(name)
        return reached

    # read before the hook's helpers are replaced: parsing raises "compile", which the hook judges where a test
    # earlier in this process installed it
    names = sorted({*EVENTS, *_branch_events(inspect.getsource(seen._hook))})
    with monkeypatch.context() as m:
        for name in ("_opened", "_os_open", "_moved", "_linked", "_touched_by", "_refuse", "_listed", "_guard",
                     "_will_write", "_sqlite", "_dlopen", "_at"):
            m.setattr(seen, name, recorder(name))
        m.setattr(declared_files, "compiled", recorder("compiled"))
        for name in ("started", "network", "addressed", "lookup"):
            m.setattr(channels, name, recorder(f"channels.{name}"))
        m.setattr(paths, "given", recorder("paths.given"))
        m.setattr(seen, "JUDGED", judged)
        m.setattr(seen, "ON", [True])
        m.setattr(seen, "FORKS_ENDED", [False])
        m.setattr(children, "FORKS", [False])
        found: dict[str, list[str]] = {}
        for event in names:
            for args in SHAPES:
                children.FORKS[0] = False
                try:
                    seen._hook(event, args)
                    what = "returned" + (" (forked)" if children.FORKS[0] else "")
                except _Reached as reached:
                    what = str(reached)
                except Exception as exc:
                    what = type(exc).__name__
                found.setdefault(event, []).append(what)
    return found


def test_the_fast_path_reaches_every_branch_the_full_hook_reaches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behaviour, not source (red-team pass 83, HOOK0/HOOK1): for every audit event CPython raises, the names C code
    raises under other names included, and several argument shapes, ``_hook`` reaches the same recorder with the fast
    path as with every event let through. The control: with ``open`` left out of JUDGED, the opens differ."""
    fast = _branches(monkeypatch, seen.JUDGED)
    full = _branches(monkeypatch, _Every())
    assert any(r != "returned" for r in full["os.posix_spawn"]) and full["builtins.id"] == ["returned"] * len(SHAPES)
    assert fast == full, {e: (full[e], fast[e]) for e in full if full[e] != fast[e]}
    short = _branches(monkeypatch, seen.JUDGED - {"open"})
    assert [e for e in full if full[e] != short[e]] == ["open"]
