"""Draw the documentation's pictures from a real run: ``python docs/generate_pictures.py``.

Runs the README's demo (two ranks of ``examples/toy_train.py``, rank 1 SIGKILLed at step 5,
``--max-restarts 3``, the embedded default: this machine, no Ray) in a temporary folder,
then writes into ``docs/pictures/``:

- ``timeline.svg``: ``elastic report RUN --out timeline.svg`` (the picture in the README
  and on docs/operating/goodput.md);
- ``timeline.html``: ``elastic report RUN --out timeline.html``, the whole page with the
  attempts' table and the goodput ledger's bars;
- ``ledger.svg``: the run's goodput ledger (``report.json``'s ``"ledger"``) as one stacked
  bar with its causes, largest first.

Nothing is drawn by hand: run it again after a change to the report and commit the files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from elastic.core.journal.ledger import CAUSE_WORDS  # noqa: E402
from elastic.views.timeline_html import LEDGER_COLORS  # noqa: E402 (the HTML page's colours)

PICTURES = REPO / "docs" / "pictures"
DEMO = ["--max-restarts", "3", "--nproc-per-node", "2", "--checkpoint-dir", "toy-checkpoints",
        "--", sys.executable, str(REPO / "examples" / "toy_train.py"), "--fail-at-step", "5"]


def elastic(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "elastic", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, check=False)


def ledger_svg(ledger: dict[str, float], width: int = 720) -> str:
    """One stacked bar of the run's seconds by cause, and a legend, largest first."""
    total = sum(ledger.values()) or 1.0
    causes = sorted(((c, s) for c, s in ledger.items() if s > 0), key=lambda cs: -cs[1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{60 + 20 * len(causes)}" '
             'font-family="sans-serif" font-size="13">',
             f'<text x="0" y="16">where the time went: {total:.1f}s of wall time</text>']
    x = 0.0
    for cause, seconds in causes:
        w = width * seconds / total
        parts.append(f'<rect x="{x:.1f}" y="24" width="{w:.1f}" height="22" fill="{LEDGER_COLORS.get(cause, "#ced4da")}">'
                     f"<title>{escape(cause)} {seconds:.2f}s</title></rect>")
        x += w
    for i, (cause, seconds) in enumerate(causes):
        y = 66 + 20 * i
        parts.append(f'<rect x="0" y="{y - 11}" width="12" height="12" fill="{LEDGER_COLORS.get(cause, "#ced4da")}"/>')
        parts.append(f'<text x="18" y="{y}">{escape(CAUSE_WORDS.get(cause, cause))}: {seconds:.1f}s ({100 * seconds / total:.0f}%)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw the docs' pictures from a real run of the demo.")
    parser.add_argument("--out", type=Path, default=PICTURES, help=f"where to write them (default: {PICTURES})")
    pictures: Path = parser.parse_args(argv).out
    pictures.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        here = Path(folder)
        ran = elastic("run", "--run-dir", str(here / "run"), *DEMO, cwd=here)
        if ran.returncode != 0:
            print(ran.stderr, file=sys.stderr)
            return 1
        for name in ("timeline.svg", "timeline.html"):
            drawn = elastic("report", str(here / "run"), "--out", str(pictures / name), cwd=here)
            if drawn.returncode != 0:
                print(drawn.stderr, file=sys.stderr)
                return 1
        report = json.loads((here / "run" / "report.json").read_text())
        (pictures / "ledger.svg").write_text(ledger_svg(report["ledger"]))
    print(f"wrote {', '.join(sorted(p.name for p in pictures.iterdir()))} in {pictures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
