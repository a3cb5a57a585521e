"""The README is a front door and the manual builds: short README, every relative link resolves,
`mkdocs build --strict` passes, and every setting documents itself (the manual's table is generated)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings

PAGES = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """Heading ids as MkDocs (Python-Markdown's toc) and GitHub make them, outside code blocks."""
    ids, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#+ (.*)", line)):
            ids.add(re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", m.group(1).strip().lower())))
    return ids


def test_the_readme_is_read_in_five_minutes():
    assert len((PROJECT_ROOT / "README.md").read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.name}: {broken}"


def test_every_setting_says_what_it_means():
    assert [name for name, field in LakeSettings.model_fields.items() if not (field.description or "").strip()] == []


def test_the_manual_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is not installed: make setup installs the docs extra"
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = (tmp_path / "site" / "settings" / "index.html").read_text()
    assert all(f"LAKEMV_{name.upper()}" in settings for name in LakeSettings.model_fields)
