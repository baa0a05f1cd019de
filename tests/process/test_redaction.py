"""What a rank prints reaches the run's records redacted: a failing rank's log tail, its diagnosis
line and the root cause in journal.jsonl, report.json and the summary; its own log keeps it all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import Launcher

SECRETS = ("pass@host", "hunter2", "s3cr3t-jwt-sig")
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqb2IifQ.s3cr3t-jwt-sig"
FAILS = f"""
print("connecting to postgresql://user:pass@host/db", flush=True)
print("SSHPASS=hunter2 sshpass -e ssh node7", flush=True)
print("CI_JOB_JWT={JWT}", flush=True)
raise ConnectionError("could not connect to server: postgresql://user:pass@host/db")
"""


def test_a_failing_ranks_printed_credentials_are_redacted_in_journal_report_and_summary(
    launcher: Launcher,
) -> None:
    """A rank prints a database URL with its password, an SSHPASS and a job's token, and fails on
    that URL; a user signature makes the URL's line the diagnosis line. None of the secrets is in
    journal.jsonl, report.json or the summary on stderr, where the lines stand redacted."""
    finished = launcher.run("--signature", "could not connect to server=deterministic",
                            command=[sys.executable, "-c", FAILS])

    assert 1 == finished.returncode, finished.explain()
    journal, report = (finished.run_dir / "journal.jsonl").read_text(), (finished.run_dir / "report.json").read_text()
    shown = {"journal.jsonl": journal, "report.json": report, "stderr": finished.stderr}
    assert [] == [(where, s) for where, text in shown.items() for s in SECRETS if s in text]
    [failed] = finished.events("worker_failed")
    assert "postgresql://user:<redacted>@host/db" in failed["diagnosis"]["line"], failed
    assert ["SSHPASS=<redacted> sshpass -e ssh node7", "CI_JOB_JWT=<redacted>"] == [
        line for line in failed["log_tail"] if line.startswith(("SSHPASS", "CI_JOB"))
    ]
    cause = json.loads(report)["attempts"][0]["root_cause"]
    assert "postgresql://user:<redacted>@host/db" in cause["diagnosis"]["line"], cause
    assert "| SSHPASS=<redacted> sshpass -e ssh node7" in finished.stderr  # the summary's last lines
    log = finished.rank_log(0, 0)
    assert all(s in log for s in SECRETS)  # the rank's own log, as it wrote it
