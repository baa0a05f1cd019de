"""elastic's ledger beside the truth, attempt by attempt: where the two part.

    python benchmarks/goodput/by_attempt.py RESULTS/CASE/elastic

reads one elastic job of the benchmark (its run directory's journal and the program's step
log) and prints, for each attempt, what the program logged (its rank 0's committed steps, the
time from the attempt's running to its first step and from its last step to the attempt's end)
beside the ledger's causes. An attempt's steps are the lines of its rank 0's pid (the journal's
``rank_pids``); its training in truth is its new steps × the run's median undisturbed step.
A ledger within a point of the truth over the run can still misplace seconds inside an attempt:
this is where to look (how the first step after a quiet start-up was found placed a look late).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elastic.core.journal.fold import RunFold, fold  # noqa: E402
from elastic.core.journal.ledger import RunLedger, run_ledger  # noqa: E402
from goodput.truth import Truth, read_lines, truth  # noqa: E402

__all__ = ["AttemptRow", "format_rows", "rows_of"]

SHOWN = ("productive", "slow_steps", "redone", "checkpoint", "startup", "exit_wait", "detection", "running_no_steps")


@dataclass(frozen=True)
class AttemptRow:
    """One attempt: the program's log beside the ledger."""

    attempt: int
    running_s: float  # its ranks' running time, as the journal has it
    steps: int  # committed by its rank 0
    new_steps: int  # of them, not committed by an earlier attempt
    first_step_after_s: float | None  # running → its first committed step, in the log
    last_step_before_s: float | None  # its last committed step → the end of its running
    ledger: dict[str, float]  # its seconds by cause

    def truth_training_s(self, step_s: float) -> float:
        return self.new_steps * step_s


def _ended_s(run: RunFold, work: Path) -> float | None:
    """The run's end as its report has it (seconds since it started), else None (the last record)."""
    try:
        ended = json.loads((work / "run" / "report.json").read_text()).get("ended_at")
        return run.since_start(datetime.fromisoformat(ended).timestamp()) if ended else None
    except (OSError, ValueError):
        return None


def rows_of(work: Path) -> tuple[list[AttemptRow], RunLedger, Truth]:
    """The rows of one elastic job's folder (``RESULTS/CASE/elastic``), its ledger and its truth."""
    events = read_lines((work / "run" / "journal.jsonl").read_text())
    run = fold(events)
    ledger = run_ledger(run, _ended_s(run, work))
    log = read_lines((work / "steps.jsonl").read_text())
    pids = {e.get("attempt"): (e.get("pids") or {}).get("0") for e in events if e.get("event") == "rank_pids"}
    steps = [line for line in log if "step" in line]
    seen: set[int] = set()
    rows = []
    for attempt in run.closed(ledger.wall_s):
        running = [s for s in attempt.spans if s.phase == "running"]
        mine = [line for line in steps if line["pid"] == pids.get(attempt.number)]
        new = {line["step"] for line in mine} - seen
        seen |= new
        start = run.wall(running[0].start_s).timestamp() if running else None
        end = run.wall(running[-1].end_s).timestamp() if running else None
        causes = ledger.of(attempt.number)
        rows.append(AttemptRow(
            attempt=attempt.number,
            running_s=sum(s.end_s - s.start_s for s in running),
            steps=len(mine),
            new_steps=len(new),
            first_step_after_s=mine[0]["t"] - start if mine and start is not None else None,
            last_step_before_s=end - mine[-1]["t"] if mine and end is not None else None,
            ledger=dict(causes.seconds) if causes is not None else {},
        ))
    return rows, ledger, truth(log, ledger.wall_s)  # over the ledger's wall time: the same seconds


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_rows(rows: Sequence[AttemptRow], ledger: RunLedger, program: Truth) -> str:
    """A markdown table, one row per attempt, and the run's goodput both ways."""
    step_s = program.step_s or 0.0
    head = ["attempt", "running s", "steps (new)", "first step after s", "last step before s",
            "truth training s", *[f"ledger {c}" for c in SHOWN]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(row.attempt), _s(row.running_s), f"{row.steps} ({row.new_steps})",
                 _s(row.first_step_after_s), _s(row.last_step_before_s), _s(row.truth_training_s(step_s)),
                 *[_s(row.ledger.get(c)) for c in SHOWN]]
        lines.append("| " + " | ".join(cells) + " |")
    productive = ledger.run.seconds.get("productive", 0.0)
    lines.append("")
    lines.append(f"run (the ledger's wall time): {ledger.wall_s:.1f} s; truth {program.unique_steps} steps × {step_s:.4f} s = "
                 f"{program.unique_steps * step_s:.2f} s, goodput {program.goodput or 0.0:.3f}; ledger productive "
                 f"{productive:.2f} s, goodput {productive / ledger.wall_s if ledger.wall_s else 0.0:.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table of one elastic job's folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="an elastic job's folder of a benchmark run (RESULTS/CASE/elastic)")
    args = parser.parse_args(argv)
    if not (args.job / "run" / "journal.jsonl").is_file() or not (args.job / "steps.jsonl").is_file():
        parser.error(f"job: {args.job} holds no run/journal.jsonl and steps.jsonl (an elastic job's folder)")
    print(format_rows(*rows_of(args.job)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
