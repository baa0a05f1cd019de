"""The docs' commands work as written: each shell block of the getting-started and failure pages
marked ``<!-- runs-in-test: exit N -->`` runs, in order, in one fresh folder a page (with
``examples/`` in it, as in a clone), on the embedded default (this machine, no Ray); it must exit
N, and each line of an output block marked ``<!-- output-checked -->`` after it must be among the
lines it printed, in shape: run ids, numbers, paths and the machine's name may differ."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import REPO, RUN_TIMEOUT_S, Launcher, launcher_env, script

PAGES = sorted((REPO / "docs" / "getting-started").glob("*.md")) + sorted((REPO / "docs" / "failures").glob("*.md"))
BLOCK = re.compile(r"<!-- (runs-in-test: exit (\d+)|output-checked) -->\n```[a-z]*\n(.*?)\n```", re.S)
SAMPLE_HOST = "vm"  # the machine the docs' samples were taken on
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
PATH = re.compile(r"(?<![\w.])/[^\s;,)]*")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Lines whose causes or phases vary from run to run: their words up to the colon are checked.
VARYING = ("where the time went", "start-up to the first step")


@dataclass
class Command:
    text: str
    status: int
    output: list[str]  # the sample lines shown after it


def commands(page: Path) -> list[Command]:
    """The page's runnable blocks, each with the checked output shown after it."""
    found: list[Command] = []
    for match in BLOCK.finditer(page.read_text()):
        if match[2] is not None:
            found.append(Command(match[3], int(match[2]), []))
        else:
            assert found, f"{page.name}: an output-checked block before any runs-in-test block"
            found[-1].output.extend(match[3].splitlines())
    return found


def shape(line: str, host: str) -> str:
    """The line with what differs between runs and machines put in words."""
    line = RUN_ID.sub("RUN", line)
    line = PATH.sub("PATH", line)
    line = re.sub(rf"\b{re.escape(host)}\b", "HOST", line)
    line = NUMBER.sub("N", line)
    for words in VARYING:
        if words in line and ":" in line[line.index(words):]:
            line = line[: line.index(":", line.index(words)) + 1]
    return " ".join(line.split())


RUNNABLE = [page for page in PAGES if commands(page)]


def test_the_getting_started_page_has_runnable_blocks() -> None:
    assert REPO / "docs" / "getting-started" / "one-machine.md" in RUNNABLE


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: f"{page.parent.name}/{page.name}")
def test_each_runnable_block_of_the_page_works_as_shown(page: Path, tmp_path: Path) -> None:
    """Every marked command exits as the page says and prints the lines it shows."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    bin_dir = tmp_path / "bin"  # `python` is this interpreter, as in an activated virtual environment
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = launcher_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    host = socket.gethostname()
    for command in commands(page):
        ran = subprocess.run(["bash", "-c", command.text], cwd=tmp_path, env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S, check=False)
        said = f"$ {command.text}\n--- exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}"
        assert command.status == ran.returncode, said
        printed = {shape(line, host) for line in (ran.stdout + ran.stderr).splitlines()}
        missing = [line for line in command.output if shape(line, SAMPLE_HOST) not in printed]
        assert [] == missing, said


def documented_keys(section: str) -> set[str]:
    """The keys in the first column of a table under ``## section`` of docs/reference/report-json.md."""
    text = (REPO / "docs" / "reference" / "report-json.md").read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    rows = [line for line in text[start : end if end >= 0 else None].splitlines() if line.startswith("| `")]
    return {key for row in rows for key in re.findall(r"`([a-z_0-9]+)`", row.split("|")[1])}


def test_report_json_page_names_exactly_the_keys_of_a_real_report(launcher: Launcher) -> None:
    """docs/reference/report-json.md lists every key of the run, of an attempt and of a failure, and no other."""
    finished = launcher.run("--nproc-per-node", 2, "--max-restarts", 1,
                            command=script("exit_with.py", 3, "--attempt", 0))  # fmt: skip
    assert 0 == finished.returncode, finished.explain()
    report = finished.report()
    first = report["attempts"][0]
    assert set(report) == documented_keys("The run")
    assert set(first) == documented_keys("Each attempt")
    assert set(first["root_cause"]) == documented_keys("Each failure")


def test_the_pictures_script_draws_them_from_a_real_run(tmp_path: Path) -> None:
    """docs/generate_pictures.py runs the demo and writes the timeline (elastic report's SVG and
    page) and the ledger's bar: what the README and docs/operating/goodput.md show."""
    drawn = subprocess.run([sys.executable, str(REPO / "docs" / "generate_pictures.py"), "--out", str(tmp_path)],
                           env=launcher_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert 0 == drawn.returncode, drawn.stderr
    assert {"timeline.svg", "timeline.html", "ledger.svg"} == {p.name for p in tmp_path.iterdir()}
    svg = (tmp_path / "timeline.svg").read_text()
    assert 'class="timeline"' in svg and "attempt 1" in svg and "killed (SIGKILL)" in svg
    assert "productive training" in (tmp_path / "ledger.svg").read_text()
