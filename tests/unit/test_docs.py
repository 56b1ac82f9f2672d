"""README is a guide of at most 200 lines; docs/ holds the reference; every relative link resolves in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # code blocks hold no links
    return LINK.findall(text)


def broken(path: Path) -> list[str]:
    """The links of a Markdown file that leave the repository or name no file or folder in it."""
    bad = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            bad.append(f"{target} (outside the repository)")
            continue
        if target.startswith("#"):
            continue
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            bad.append(f"{target} (no such file in the repository)")
    return bad


def test_readme_is_a_guide_of_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:3] == ["## On a fresh machine", "## A first verify, and what its report says",
                            "## Use it in your project"], headings


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    assert broken(page) == []


def test_every_docs_page_is_indexed() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and f"]({p.name})" not in index]
    assert missing == []


def test_the_link_check_fails_on_a_bad_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x\n", encoding="utf-8")
    page.write_text("[ok](there.md) [gone](missing.md) [web](https://example.org/x) [up](../../etc/passwd)\n"
                    "```\n[in code](nowhere.md)\n```\n", encoding="utf-8")
    globals()["ROOT"], saved = tmp_path, ROOT
    try:
        assert broken(page) == ["missing.md (no such file in the repository)",
                                "https://example.org/x (outside the repository)",
                                "../../etc/passwd (no such file in the repository)"]
    finally:
        globals()["ROOT"] = saved


COUNT = re.compile(r"\b\d[\d,]*\s+(?:unit\s+|e2e\s+|end-to-end\s+)?(?:test (?:files|modules|cases)|tests?)\b", re.I)


def test_readme_carries_no_count_every_change_must_bump() -> None:
    """A number of tests in README goes stale with the next test added: the suite's length is in CI's log."""
    assert COUNT.findall((ROOT / "README.md").read_text(encoding="utf-8")) == []
    assert COUNT.findall("The suite: 812 tests (58 test files), 1,204 unit tests.") == ["812 tests", "58 test files",
                                                                                       "1,204 unit tests"]
