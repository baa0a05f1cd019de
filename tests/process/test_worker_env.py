"""What a real rank process sees in its environment (DESIGN §8), and what must never be shown."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import Finished, Launcher, launcher_env, script

RUN_ID = "env-test"


def _envs(directory: Path, count: int) -> list[dict[str, str]]:
    return [
        json.loads((directory / f"attempt-0-rank-{rank}.json").read_text()) for rank in range(count)
    ]


def _shown(finished: Finished) -> dict[str, str]:
    """Everything the launcher wrote for people and machines, by where it went."""
    files = ("journal.jsonl", "state.json", "report.json")
    return {
        "stdout": finished.stdout,
        "stderr": finished.stderr,
        **{name: (finished.run_dir / name).read_text() for name in files},
    }


def test_every_rank_sees_the_torchrun_and_elastic_variables_with_consistent_values(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Three ranks on one node see their own rank numbers and one shared world, master, run id."""
    envs_dir = tmp_path / "envs"
    envs_dir.mkdir()
    finished = launcher.run(
        "--nproc-per-node",
        3,
        "--max-restarts",
        2,
        "--run-id",
        RUN_ID,
        command=script("dump_env.py", envs_dir),
    )
    assert 0 == finished.returncode, finished.explain()
    envs = _envs(envs_dir, 3)
    [started] = finished.events("attempt_started")
    attempt_dir = launcher.run_dir / "attempt-0"

    for rank, env in enumerate(envs):
        r = str(rank)
        expected = {
            "RANK": r, "LOCAL_RANK": r, "GLOBAL_RANK": r, "ROLE_RANK": r,
            "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3", "ROLE_WORLD_SIZE": "3", "NPROCS": "3",
            "GROUP_RANK": "0", "NODE_RANK": "0", "GROUP_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(started["master_port"]),
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2",
            "TORCHELASTIC_RUN_ID": RUN_ID, "ELASTIC_RUN_ID": RUN_ID, "ELASTIC_ATTEMPT": "0",
            "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1",
        }  # fmt: skip
        assert expected == {name: env.get(name) for name in expected}
        assert attempt_dir == Path(env["TORCHELASTIC_ERROR_FILE"]).parent
        assert attempt_dir == Path(env["ELASTIC_HEARTBEAT_FILE"]).parent
        host, _, port = env["ELASTIC_COORDINATOR_ADDRESS"].rpartition(":")
        assert ("127.0.0.1", True) == (host, port.isdigit() and port != env["MASTER_PORT"])
        # With the rank bootstrap (the default) JAX_COORDINATOR_ADDRESS is the host alone, as
        # MaxText's CPU path reads it; the bootstrap gives JAX the attempt's port.
        assert ("127.0.0.1", port) == (env["JAX_COORDINATOR_ADDRESS"], env["JAX_COORDINATOR_PORT"])

    assert 1 == len({env["ROLE_NAME"] for env in envs}) and envs[0]["ROLE_NAME"]
    assert 3 == len({env["TORCHELASTIC_ERROR_FILE"] for env in envs})
    assert 3 == len({env["ELASTIC_HEARTBEAT_FILE"] for env in envs})
    assert 1 == len({env["ELASTIC_COORDINATOR_ADDRESS"] for env in envs})


def test_omp_num_threads_is_left_alone_for_a_single_rank_or_when_already_set(
    launcher: Launcher, tmp_path: Path
) -> None:
    """One rank per node gets no OMP_NUM_THREADS; a value the user set reaches ranks unchanged."""
    single, preset = tmp_path / "single", tmp_path / "preset"
    single.mkdir()
    preset.mkdir()
    assert (
        0 == launcher.run("--nproc-per-node", 1, command=script("dump_env.py", single)).returncode
    )

    launcher.run_dir = tmp_path / "run-preset"
    finished = launcher.run(
        "--nproc-per-node",
        2,
        command=script("dump_env.py", preset),
        env=launcher_env(OMP_NUM_THREADS="4", PYTHONFAULTHANDLER="yes"),
    )
    assert 0 == finished.returncode, finished.explain()

    assert "OMP_NUM_THREADS" not in _envs(single, 1)[0]
    assert [("4", "yes"), ("4", "yes")] == [
        (env["OMP_NUM_THREADS"], env["PYTHONFAULTHANDLER"]) for env in _envs(preset, 2)
    ]


def test_secret_looking_variables_reach_the_rank_but_never_the_journal_report_or_console(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Secret-looking variables reach the rank unchanged; their values are in no file or console."""
    secrets = {
        "MY_API_TOKEN": "hunter2-token-5f3a",
        "DB_PASSWORD": "hunter2-password-91c2",
        "AWS_SECRET_ACCESS_KEY": "hunter2-secret-77d0",
        "GITHUB_AUTH": "hunter2-auth-0e11",
        "SENTRY_DSN": "https://hunter2-dsn-6b2d@o1.ingest.sentry.io/1",
        "STORAGE_CONNECTION_STRING": "AccountKey=hunter2-conn-9f0a",
        "SESSION_COOKIE": "hunter2-cookie-2c4b",
        "SIGNING_PRIVATE_PEM": "hunter2-private-8e3d",
        "DATABASE_URL": "postgresql://alice:hunter2-url-4a7c@db.internal/train",
        "DB_PASS": "hunter2-dbpass-3e1f",
        "MYSQL_PWD": "hunter2-mysqlpwd-77",
        "SMTP_PASS": "hunter2-smtp-5c0d",
        "GH_PAT": "hunter2-ghpat-a9b8",
        "GPG_PASSPHRASE": "hunter2-phrase-0f",
        "CACHE_URL": "redis://bob:hunter2-slash/6d@cache.internal:6379/0",
        "SSHPASS": "hunter2-sshpass-41",
        "DOCKER_AUTH_CONFIG": '{"auths": {"registry.example": {"auth": "hunter2-docker-b7"}}}',
        "CI_JOB_JWT": "hunter2-jobjwt-e2",
    }
    envs_dir = tmp_path / "envs"
    envs_dir.mkdir()
    finished = launcher.run(
        "--max-restarts",
        1,
        command=script("dump_env.py", envs_dir, "--exit", 1, "--attempt", 0),
        env=launcher_env(**secrets),
    )
    assert 0 == finished.returncode, finished.explain()

    for attempt in (0, 1):
        env = json.loads((envs_dir / f"attempt-{attempt}-rank-0.json").read_text())
        assert secrets == {name: env.get(name) for name in secrets}
    leaks = [
        (where, n)
        for where, text in _shown(finished).items()
        for n in secrets
        if secrets[n].split("hunter2-")[1][:10] in text
    ]
    assert [] == leaks
    [started] = finished.events("run_started")
    assert "postgresql://alice:<redacted>@db.internal/train" == started["environment"]["DATABASE_URL"]
    assert "redis://bob:<redacted>@cache.internal:6379/0" == started["environment"]["CACHE_URL"]


def test_secret_looking_arguments_of_the_command_are_hidden_from_journal_report_and_console(
    launcher: Launcher, tmp_path: Path
) -> None:
    """`--api-token X`, `DB_PASSWORD=X`, `--db-pass X`, `--passphrase=X` and `--db URL-with-password`
    reach the rank; X is shown nowhere."""
    out = tmp_path / "argv.json"
    secrets = ["hunter2-argv-1b7e", "hunter2-argv-c40f", "hunter2-argv-url3", "hunter2-argv-dbp4",
               "hunter2-argv-phr5", "hunter2-argv-pat6"]
    command = script("record_argv.py", out, "--api-token", secrets[0], f"DB_PASSWORD={secrets[1]}",
                     "--db-pass", secrets[3], f"--passphrase={secrets[4]}", f"GH_PAT={secrets[5]}",
                     "--db", f"postgresql://alice:{secrets[2]}@host/db")
    finished = launcher.run(command=command)
    assert 0 == finished.returncode, finished.explain()
    [started] = finished.events("run_started")
    assert "postgresql://alice:<redacted>@host/db" == started["command"][-1]
    assert "postgresql://alice:<redacted>@host/db" == finished.report()["command"][-1]

    assert [sys.executable, *command[1:]] == json.loads(out.read_text())
    assert [] == [
        (where, s) for where, text in _shown(finished).items() for s in secrets if s in text
    ]
