"""Ranks that step at their own pace, or in lockstep, one of them slower: for straggler reports.

Usage: straggles.py MODE SLOW_RANK[xFACTOR] STEP_S COUNT [compute]

- ``free``: each rank prints ``step N`` every STEP_S seconds (SLOW_RANK every
  FACTOR × STEP_S, 2 unless given: ``1x3``) for COUNT × STEP_S seconds, then exits 0: independent workers,
  whose step intervals show the slow one. SLOW_RANK -1: every rank at one pace.
  Only attempt 0 has a slow rank; a relaunch runs evenly, a quarter as long.
- ``lockstep``: COUNT steps, each ``work`` (STEP_S, SLOW_RANK FACTOR × STEP_S) then a
  barrier over TCP on MASTER_PORT (rank 0 answers once every rank arrived), then
  ``step N``: every rank's lines come at the slowest's pace, as in synchronous
  data parallel. With ``compute``, each rank also calls
  ``elastic.heartbeat(step=N, compute_s=<its work's seconds>)``.
"""

import os
import socket
import sys
import time

mode, step_s, count = sys.argv[1], float(sys.argv[3]), int(sys.argv[4])
slow_rank, _, factor = sys.argv[2].partition("x")
slow, slow_factor = int(slow_rank), float(factor or 2)
compute = sys.argv[5:] == ["compute"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    slow, count = -1, count // 4
mine_s = slow_factor * step_s if rank == slow else step_s


def work() -> float:
    began = time.perf_counter()
    time.sleep(mine_s)
    return time.perf_counter() - began


def links() -> list[socket.socket]:
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if rank == 0:
        server = socket.create_server(address)
        server.settimeout(60)
        return [server.accept()[0] for _ in range(world - 1)]
    deadline_at = time.monotonic() + 60
    while True:
        try:
            return [socket.create_connection(address, timeout=60)]
        except OSError:
            if time.monotonic() > deadline_at:
                sys.exit(2)
            time.sleep(0.05)


def barrier(peers: list[socket.socket]) -> None:
    if rank == 0:
        for peer in peers:
            if not peer.recv(1):
                sys.exit(1)
        for peer in peers:
            peer.sendall(b"y")
    else:
        peers[0].sendall(b"x")
        if not peers[0].recv(1):
            sys.exit(1)


if mode == "free":
    ends_at = time.monotonic() + count * step_s
    step = 0
    while time.monotonic() < ends_at:
        work()
        step += 1
        print(f"step {step} loss 2.31", flush=True)
elif mode == "lockstep":
    peers = links()
    for step in range(1, count + 1):
        seconds = work()
        barrier(peers)
        print(f"step {step} loss 2.31", flush=True)
        if compute:
            import elastic

            elastic.heartbeat(step=step, compute_s=seconds)
else:
    sys.exit(f"unknown mode {mode}")
