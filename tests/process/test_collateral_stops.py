"""A failure's survivors that will not exit on SIGTERM are killed at once, unless a checkpoint
write is under way on their node: then they get the whole --failure-grace to finish it. One whose
own handler caught SIGTERM gets the whole grace too: its graceful exit may be under way.

No wall-clock assertion: the grace is far beyond the harness's bound on a whole run, so a
survivor that waited it out fails the test by that bound, and the journal says how each
survivor was killed and why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from elastic.core.failures import RECENT_WRITE_S
from harness import RUN_TIMEOUT_S, Finished, Launcher, launcher_env, per_rank, skip_unless_installed, status_text

LONG_GRACE_S = 600  # far beyond RUN_TIMEOUT_S: a survivor given it fails the test by the harness's bound
WRITE_GRACE_S = 10  # the slow save below takes about 5 s of it
HANDLER_GRACE_S = 30  # a graceful exit of about 2 s below, on a loaded machine


@pytest.fixture
def quiet_checkpoint_dir(tmp_path: Path) -> Path:
    """A checkpoint directory last written a minute ago (its last save long done)."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "ckpt-old.bin").write_bytes(b"an earlier save")
    for path in (directory / "ckpt-old.bin", directory):
        long_ago = path.stat().st_mtime - 60
        os.utime(path, (long_ago, long_ago))
    return directory


def _killed(finished: Finished) -> list[dict[str, Any]]:
    [stopped] = finished.events("workers_stopped")
    killed: list[dict[str, Any]] = stopped.get("killed_at_grace", [])
    return killed


def test_a_survivor_ignoring_sigterm_is_killed_at_once_when_no_checkpoint_write_is_under_way(
    launcher: Launcher, pid_dir: Path, quiet_checkpoint_dir: Path
) -> None:
    """Rank 1 exits 3, rank 0 ignores SIGTERM, the checkpoint directory is quiet: rank 0 is
    SIGKILLed at once, not after --failure-grace 600, and summary, report and status say so."""
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", LONG_GRACE_S, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(
            ["ignore_sigterm.py", pid_dir],
            ["exit_with.py", 3, "--wait-for", pid_dir / "rank-0.pid"],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)
    assert (0, "ignored", "at_once", 0.0) == (
        killed["rank"], killed["disposition"], killed["collateral"], killed["waited_s"]
    )
    assert (True, False) == (killed["checkpoint_dir_seen"], killed["checkpoint_open_for_write"])
    line = (
        f"rank 0 ignored SIGTERM; killed at once, not after {LONG_GRACE_S} s (--failure-grace): "
        "no checkpoint write was under way"
    )
    assert line in finished.stderr
    attempt = finished.report()["attempts"][0]
    assert [line] == attempt["killed_at_grace"]["description"]
    assert "at_once" == attempt["killed_at_grace"]["ranks"][0]["collateral"]
    assert f"attempt 0: {line}" in status_text(finished.run_dir)


@pytest.mark.parametrize("then", [[], ["ignore"]], ids=["handler", "handler-then-sig-ign"])
def test_a_survivor_whose_own_handler_exits_gracefully_finishes_its_exit_within_the_failure_grace(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path, then: list[str]
) -> None:
    """Rank 1 fails; rank 0's own SIGTERM handler raises SystemExit (having set SIGTERM to SIG_IGN,
    or not), and its finally block and an atexit handler then work for about 2 s (a
    wandb.finish(), a flush) and write a file outside the checkpoint directory, where nothing is
    being written: no checkpoint write is seen, yet rank 0 is not killed at the node's short
    window. It finishes its exit, within the grace."""
    ready, out = tmp_path / "ready", tmp_path / "out"
    out.mkdir()
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", HANDLER_GRACE_S, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(["exit_gracefully.py", out, 2.0, ready, *then], ["exit_with.py", 3, "--wait-for", ready]),
    )

    assert 3 == finished.returncode, finished.explain()
    assert "finally atexit" == (out / "finished-0").read_text()
    assert [] == _killed(finished), finished.explain()
    [survivor] = [e for e in finished.events("worker_failed") if e["rank"] == 0]
    assert ("collateral", "SIGTERM") == (survivor["kind"], survivor["signal"]), survivor  # exit 143: 128 + SIGTERM


def test_a_survivor_whose_own_handler_does_not_exit_gets_the_whole_failure_grace(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path
) -> None:
    """A handler of the rank's own that carries on may be running its exit: the survivor is
    killed when --failure-grace runs out, not at the node's short window, and the summary says why."""
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", 2, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(["catch_sigterm.py", ready], ["exit_with.py", 3, "--wait-for", ready]),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)
    assert ("caught", "handler", True, True, None) == (
        killed["disposition"], killed["collateral"], killed["own_handler"], killed["handler_ran"], killed["waited_s"]
    )
    line = (
        "rank 0 caught SIGTERM in its own handler but did not exit; killed after 2 s (--failure-grace): a rank "
        "whose own handler caught SIGTERM has the whole grace to exit"
    )
    assert line in finished.stderr
    assert [line] == finished.report()["attempts"][0]["killed_at_grace"]["description"]


def test_a_survivor_blocking_sigterm_is_killed_after_the_short_window(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path
) -> None:
    """No handler of its own runs in a rank that blocks SIGTERM: it gets the node's short window
    to exit, then the SIGKILL, not --failure-grace."""
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", LONG_GRACE_S, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(["block_sigterm.py", ready], ["exit_with.py", 3, "--wait-for", ready]),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)
    assert ("blocked", "at_once") == (killed["disposition"], killed["collateral"])
    assert 0 < killed["waited_s"] < LONG_GRACE_S
    assert (
        f"rank 0 blocked SIGTERM; killed after {killed['waited_s']:g} s, not after "
        f"{LONG_GRACE_S} s (--failure-grace): no checkpoint write was under way"
    ) in finished.stderr


def test_a_survivor_writing_a_checkpoint_gets_the_whole_failure_grace_and_its_save_is_whole(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path
) -> None:
    """Rank 1 fails while rank 0, which ignores SIGTERM, is in the middle of a slow save (the file
    open, its last chunk written a while before): rank 0 is not killed mid-write; it finishes the
    save within --failure-grace and only then, still not exiting, is killed at the grace's end."""
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", WRITE_GRACE_S, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(
            ["save_slowly.py", quiet_checkpoint_dir, ready, 3, 1.2],
            ["exit_with.py", 3, "--wait-for", ready],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    saved = quiet_checkpoint_dir / "ckpt-0.bin"
    assert saved.exists(), sorted(p.name for p in quiet_checkpoint_dir.iterdir())
    assert b"".join(bytes([chunk]) * (1 << 20) for chunk in range(3)) == saved.read_bytes()
    assert "saved" in finished.rank_log(0, 0)
    [killed] = _killed(finished)
    assert (0, "ignored", "writing") == (killed["rank"], killed["disposition"], killed["collateral"])
    assert finished.report()["attempts"][0]["killed_at_grace"]["description"][0].startswith(
        f"rank 0 ignored SIGTERM; killed after {WRITE_GRACE_S} s (--failure-grace): "
        "a checkpoint write was under way ("
    )


def test_a_survivor_that_just_finished_a_save_is_killed_once_the_write_is_seen_to_be_over(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path
) -> None:
    """Rank 1 fails just after rank 0 (ignoring SIGTERM) finished a save: the directory was written
    a moment ago and no file is open. Over, or a pause between two files? The node looks again once
    that write would count as over, sees nothing new, and kills rank 0 then, not after the grace."""
    ready = tmp_path / "ready"
    finished = launcher.run(
        "--nproc-per-node", 2, "--failure-grace", LONG_GRACE_S, "--checkpoint-dir", quiet_checkpoint_dir,
        command=per_rank(
            ["save_slowly.py", quiet_checkpoint_dir, ready, 1, 0, "after"],
            ["exit_with.py", 3, "--wait-for", ready],
        ),
    )

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)
    assert ("ignored", "at_once", False) == (
        killed["disposition"], killed["collateral"], killed["checkpoint_open_for_write"]
    )
    # The second look's: the save's last write, then older than a write under way.
    assert killed["checkpoint_written_s"] >= RECENT_WRITE_S
    assert 0 < killed["waited_s"] < LONG_GRACE_S
    assert (
        f"rank 0 ignored SIGTERM; killed after {killed['waited_s']:g} s, not after {LONG_GRACE_S} s "
        "(--failure-grace): no checkpoint write was under way"
    ) in finished.stderr


def _jax_pair(launcher: Launcher, ready: Path, checkpoint_dir: Path, grace_s: float, survivor: str) -> Finished:
    """Two JAX processes: rank 1 exits 3 once both are up; rank 0, the survivor, does ``survivor``
    (``wait``: only JAX's preemption service holds SIGTERM; ``save``: a handler of its own too)."""
    skip_unless_installed("jax")  # the ranks import it; this process need not
    return launcher.run(
        "--nproc-per-node", 2, "--failure-grace", grace_s, "--checkpoint-dir", checkpoint_dir,
        command=per_rank(["jax_world.py", ready, survivor], ["jax_world.py", ready, "exit"]),
        env=launcher_env(JAX_PLATFORMS="cpu"),
        timeout_s=RUN_TIMEOUT_S * 2,  # two JAX imports on a loaded machine
    )


def test_a_jax_survivor_is_killed_at_once(launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path) -> None:
    """A rank of a two-process JAX job whose peer fails: JAX's preemption service catches SIGTERM,
    so it is SIGKILLed at once, said with the preemption service's hint."""
    finished = _jax_pair(launcher, tmp_path / "ready", quiet_checkpoint_dir, LONG_GRACE_S, "wait")

    assert 3 == finished.returncode, finished.explain()
    [killed] = _killed(finished)
    assert (0, "caught", True, "at_once", 0.0) == (
        killed["rank"], killed["disposition"], killed["jax"], killed["collateral"], killed["waited_s"]
    )
    assert (
        f"rank 0 ignored SIGTERM (JAX's preemption service catches it); killed at once, not after "
        f"{LONG_GRACE_S} s (--failure-grace): no checkpoint write was under way"
    ) in finished.stderr


def test_a_jax_survivor_whose_own_handler_caught_sigterm_keeps_its_grace(
    launcher: Launcher, tmp_path: Path, quiet_checkpoint_dir: Path
) -> None:
    """A JAX rank that installed a SIGTERM handler of its own after JAX's: SigCgt alone cannot tell
    it from JAX's preemption service, the rank bootstrap's record can. Its handler saves for a
    second and exits; it is not killed at once."""
    finished = _jax_pair(launcher, tmp_path / "ready", quiet_checkpoint_dir, HANDLER_GRACE_S, "save")

    assert 3 == finished.returncode, finished.explain()
    assert (tmp_path / "ready.saved").exists(), finished.explain()
    assert [] == _killed(finished), finished.explain()
