"""A rank under elastic sees what a rank under real torchrun sees, except the differences the
"torchrun's variables" table of docs/reference/environment.md documents, and elastic's additions are documented too."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO, Launcher, launcher_env, script, skip_unless_installed

skip_unless_installed("torch")

RUN_ID = "torchrun-env"
NPROC = 2
TORCHRUN_TIMEOUT_S = 120.0
# Set by torchrun only when asked: with --virtual-local-rank, with TORCHELASTIC_ENABLE_FILE_TIMER=1.
CONDITIONAL = {"CUDA_VISIBLE_DEVICES", "TORCHELASTIC_TIMER_FILE"}
# Variables whose value is the same under both launchers for the same ranks.
SAME = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE", "OMP_NUM_THREADS",
}  # fmt: skip


def _page_section(heading: str) -> str:
    """A section of docs/reference/environment.md, the rank environment's page."""
    text = "\n" + (REPO / "docs" / "reference" / "environment.md").read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n#", start + len(heading) + 2)
    return text[start:end]


def _table_names(section: str) -> set[str]:
    """The variables named in the first column of a docs table."""
    names: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2 and "`" in cells[1]:
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[1]))
    return names


def _envs(directory: Path) -> list[dict[str, str]]:
    return [json.loads((directory / f"attempt-0-rank-{r}.json").read_text()) for r in range(NPROC)]


def _torchrun(env: dict[str, str], out: Path, cwd: Path) -> list[dict[str, str]]:
    """Run the env-dumping script under real torchrun (single node, as `torchrun --standalone`)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(NPROC),
            "--max-restarts", "2", *script("dump_env.py", out)[1:]]  # fmt: skip
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=TORCHRUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # by pid: the session this test started
        process.communicate()
        pytest.fail("torchrun did not end")
    assert 0 == process.returncode, output.decode(errors="replace")[-4000:]
    return _envs(out)


def test_ranks_see_every_torchrun_variable_and_only_the_documented_differences(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Each variable torchrun sets reaches elastic's ranks, with torchrun's value or the
    docs' documented one; what elastic sets besides is in the docs' rank table."""
    base = launcher_env()
    torchrun_out, elastic_out = tmp_path / "torchrun", tmp_path / "elastic"
    torchrun_out.mkdir()
    elastic_out.mkdir()
    torchrun_envs = _torchrun(base, torchrun_out, tmp_path)
    finished = launcher.run("--nproc-per-node", NPROC, "--max-restarts", 2, "--run-id", RUN_ID,
                            command=script("dump_env.py", elastic_out), env=base)  # fmt: skip
    assert 0 == finished.returncode, finished.explain()
    elastic_envs = _envs(elastic_out)

    set_by_torchrun = {name for env in torchrun_envs for name in env if name not in base} - {"ARGV_EXTRA"}
    documented = _table_names(_page_section("## torchrun's variables"))
    assert documented - CONDITIONAL == set_by_torchrun

    for rank, (theirs, ours) in enumerate(zip(torchrun_envs, elastic_envs)):
        assert {n: theirs[n] for n in SAME} == {n: ours.get(n) for n in SAME}
        assert str(rank) == ours["RANK"]
        # torchrun --standalone: rank 0's agent's host name (socket.getfqdn()); elastic: the address.
        assert (socket.getfqdn(), "127.0.0.1") == (theirs["MASTER_ADDR"], ours["MASTER_ADDR"])
        assert theirs["MASTER_PORT"].isdigit() and ours["MASTER_PORT"].isdigit()
        assert ("True", "False") == (theirs["TORCHELASTIC_USE_AGENT_STORE"], ours["TORCHELASTIC_USE_AGENT_STORE"])
        assert RUN_ID == ours["TORCHELASTIC_RUN_ID"] != theirs["TORCHELASTIC_RUN_ID"]
        assert finished.run_dir / "attempt-0" / f"rank-{rank}.error.json" == Path(ours["TORCHELASTIC_ERROR_FILE"])
        assert theirs["TORCHELASTIC_ERROR_FILE"].endswith("error.json")
    assert 1 == len({env["TORCHELASTIC_RUN_ID"] for env in torchrun_envs})
    assert NPROC == len({env["TORCHELASTIC_ERROR_FILE"] for env in torchrun_envs})

    # What elastic sets that torchrun does not, and the launcher's variables it changes.
    rank_table = _table_names(_page_section("# What each rank sees"))
    for ours in elastic_envs:
        added = {name for name in ours if name not in base and name not in set_by_torchrun} - {"ARGV_EXTRA"}
        changed = {name for name in base if ours.get(name) != base[name]}
        assert set() == (added | changed) - rank_table


def test_a_value_the_user_set_is_kept_and_the_agent_store_is_never_claimed(
    launcher: Launcher, tmp_path: Path
) -> None:
    """torchrun's defaults yield to the user's values (the NCCL variable's old name too);
    an inherited TORCHELASTIC_USE_AGENT_STORE=True is replaced, since elastic serves no store."""
    nccl_old, user = tmp_path / "nccl-old", tmp_path / "user"
    nccl_old.mkdir()
    user.mkdir()
    settings = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGUSR1"}
    env = launcher_env(**settings)
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # as inside a torchrun rank
    finished = launcher.run("--nproc-per-node", NPROC, command=script("dump_env.py", user), env=env)
    assert 0 == finished.returncode, finished.explain()
    for ours in _envs(user):
        assert {**settings, "TORCHELASTIC_USE_AGENT_STORE": "False"} == {
            name: ours.get(name) for name in (*settings, "TORCHELASTIC_USE_AGENT_STORE")
        }

    launcher.run_dir = tmp_path / "run-nccl-old"
    finished = launcher.run("--nproc-per-node", NPROC, command=script("dump_env.py", nccl_old),
                            env=launcher_env(NCCL_ASYNC_ERROR_HANDLING="0"))  # fmt: skip
    assert 0 == finished.returncode, finished.explain()
    for ours in _envs(nccl_old):
        assert ("0", None) == (ours.get("NCCL_ASYNC_ERROR_HANDLING"), ours.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"))
