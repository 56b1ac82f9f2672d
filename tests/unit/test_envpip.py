"""kernodeck/env/envpip.py: the pip that reads a build before its seal, and the one process it runs in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernodeck.env import envpip
from kernodeck.env.pythons import bundled_pip
from tests.helpers.tinylock import fresh_venv, offline_env

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
NONCE = envpip.nonce()


def test_kernodecks_pip_serves_a_python_its_requires_python_admits_and_no_other() -> None:
    folder = envpip.tool_pip(HERE)
    assert folder is not None and (folder / "__init__.py").is_file() and folder.name == "pip"
    assert envpip.tool_version(folder)[0].isdigit()
    assert envpip.tool_pip("2.7") is None  # refused by its Requires-Python: the wheel or the env's pip reads instead


def test_split_reads_each_commands_output_and_status_and_a_missing_line_as_failed() -> None:
    out = f"a==1\n--- kernodeck {NONCE}: freeze exited 0 ---\nbroken\n--- kernodeck {NONCE}: check exited 1 ---\n"
    assert envpip.split_check_and_freeze(out, NONCE) == ("a==1\n", "broken\n", 0, 1)
    assert envpip.split_check_and_freeze(f"a==1\n--- kernodeck {NONCE}: freeze exited 0 ---\n", NONCE)[2:] == (0, -1)
    assert envpip.split_check_and_freeze("Traceback ...\n", NONCE)[2:] == (-1, -1)
    # lines with another nonce (one written before it was drawn) are output, not the process's lines
    assert envpip.split_check_and_freeze(out.replace(NONCE, "guessed"), NONCE)[2:] == (-1, -1)
    assert envpip.nonce() != envpip.nonce() and len(envpip.nonce()) == 32


def _seeded(tmp_path: Path) -> tuple[Path, Path]:
    """A venv seeded with pip and setuptools, and a top-level ``socks.py`` and a ``.pth`` line that leave a mark if
    they ever run."""
    python = fresh_venv(tmp_path / "v", with_pip=True)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    mark = tmp_path / "ran"
    (site / "socks.py").write_text(f"open({str(mark)!r}, 'a').write('socks')\n", encoding="utf-8")
    (site / "x.pth").write_text(f"import os; open({str(mark)!r}, 'a').write('pth')\n", encoding="utf-8")
    return python, mark


def _run(argv: list[str], cwd: Path) -> dict[str, tuple[str, int]]:
    done = subprocess.run(argv, capture_output=True, text=True, env=offline_env(), cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr[-800:]
    return envpip.split(done.stdout, ("uninstall",), NONCE)


def test_the_seeds_are_removed_by_each_reader_with_nothing_of_the_env_run(tmp_path: Path) -> None:
    python, mark = _seeded(tmp_path)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    tool = envpip.tool_pip(HERE)
    assert tool is not None
    for reader, name in (([str(tool)], "setuptools"), ([f"{bundled_pip(sys.executable)}/pip"], "pip")):
        assert list(site.glob(f"{name}-*.dist-info"))
        said = _run(envpip.argv([str(python), "-I", *reader], tmp_path / "v", (("uninstall", "--yes", name),), NONCE),
                    tmp_path)
        assert said["uninstall"][1] == 0, said
        assert not list(site.glob(f"{name}-*.dist-info")) and not (site / name).exists()
    assert not mark.exists()
    # control: the same env started with its site runs the .pth line
    subprocess.run([str(python), "-c", "pass"], check=True, env=offline_env(), cwd=tmp_path)
    assert mark.read_text(encoding="utf-8").startswith("pth")


def test_a_failed_removal_is_read_as_failed(tmp_path: Path) -> None:
    python, _ = _seeded(tmp_path)
    site = next((tmp_path / "v").glob("lib/python*/site-packages"))
    next(site.glob("setuptools-*.dist-info")).joinpath("RECORD").unlink()  # pip cannot uninstall it
    said = _run(envpip.argv([str(python), "-I", str(envpip.tool_pip(HERE))], tmp_path / "v",
                            (("uninstall", "--yes", "setuptools"),), NONCE), tmp_path)
    assert said["uninstall"][1] != 0 and "RECORD" in said["uninstall"][0], said  # its cause, with its output
