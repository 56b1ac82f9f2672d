"""A fake in-env runner that passes ``settings`` and then stalls in ``application`` (or, with ``fake_mode = "ends"``
in its run config, ends at once), on a copy of the project with a 2 s stall deadline: a stopped in-env process as
each command records it, on real processes without torch (tests/unit/test_in_env.py, test_variations.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.project import copy_project

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"

FAKE = f'''\
import json, runpy, sys, time
from pathlib import Path

runpy.run_path({str(INENV / "_package.py")!r})
from kernodeck_inenv.stackhooks import install

install()
config = Path(sys.argv[sys.argv.index("--config") + 1])
out = config.parent
(out / "steps").mkdir(exist_ok=True)
(out / "steps" / "01-settings.json").write_text(json.dumps({{"name": "settings", "status": "passed"}}))
print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
print("[kernodeck] application: batch 1/8", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "ends":
    (out / "noise.json").write_text(json.dumps({{"variation": {{}}, "outputs": {{}}, "observed": {{}}}}))
    sys.exit(0)
while True:
    time.sleep(0.1)  # HANG-LINE
'''
HANG_LINE = next(n for n, text in enumerate(FAKE.splitlines(), start=1) if "HANG-LINE" in text)


def hang_project(root: Path) -> Path:
    """A copy of the project at ``root`` with the fake runner as checks/fake_runner.py and a 2 s stall deadline."""
    root = copy_project(root)
    (root / "checks" / "fake_runner.py").write_text(FAKE, encoding="utf-8")
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.kernodeck.deadlines]\nstall = 2\n")
    return root
