"""The documentation site builds: `mkdocs build --strict` fails on a broken link or anchor, a page
missing from the nav or a nav entry with no page, and a snippet whose file is gone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly_offline(tmp_path: Path) -> None:
    """mkdocs.yml at the root, docs/ its pages: the build warns about nothing (strict)."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert 0 == built.returncode, built.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "pictures" / "timeline.svg").is_file()
    # Readable offline: no script, stylesheet or font fetched from another site (a CDN).
    fetched = [
        (page.name, found) for page in (tmp_path / "site").rglob("*.html")
        for found in re.findall(r'<(?:script|link)[^>]*(?:src|href)="(?:https?:)?//[^"]*"', page.read_text())
    ]
    assert [] == fetched


def test_the_pictures_are_drawn_by_elastic_report() -> None:
    """The timeline the README and the docs show is `elastic report --out timeline.svg`'s, written by
    docs/generate_pictures.py from a real run, not drawn by hand."""
    svg = (ROOT / "docs" / "pictures" / "timeline.svg").read_text()
    assert 'class="timeline"' in svg and "attempt 1" in svg
    assert "docs/pictures/timeline.svg" in (ROOT / "README.md").read_text()
