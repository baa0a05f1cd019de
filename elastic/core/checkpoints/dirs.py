"""Whether a checkpoint directory that carries no trusted commit marker is whole (pure).

Two savers leave directories whose completeness must be read from their
content, from facts the scan in :mod:`elastic.run.watches.checkpoint_scan` gathered:

- The Hugging Face Trainer's ``checkpoint-N``: its main process writes
  ``trainer_state.json`` after its own files but not after other processes'
  (each writes its ``rng_state_N.pth`` unsynchronised), and not atomically.
  Sharded weights come with an index (``model.safetensors.index.json``) that
  names every shard; FSDP's sharded state is torch.distributed.checkpoint
  directories (``pytorch_model_fsdp_0/``, ``optimizer_0/``) committed by their
  ``.metadata``; DeepSpeed's is a tag directory named by ``latest``.
- DeepSpeed's own ``save_checkpoint(dir)``: ``global_stepN/`` with the model
  states and each data-parallel rank's ZeRO states, no marker at all; rank 0
  writes ``latest`` before the others are known to be done.

- Orbax's step directory whose only marker is ``_CHECKPOINT_METADATA``: in
  Orbax's commit-file mode (``AtomicityMode.COMMIT_FILE``, the default on
  object stores) the step directory is created under its final name with that
  file in it before any data is written; only its ``commit_timestamp_nsecs``,
  added once every process's data is written, says the save finished.

A process that has not created its files yet cannot be seen, except where the
save records how many there must be (DeepSpeed's ``dp_world_size``); a
missing ``rng_state_N.pth`` only costs the Trainer exact RNG replay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from elastic.core.checkpoints.formats import FileFacts, pickled_int, structure_problem
from elastic.core.checkpoints.names import CHECKPOINT_EXTENSIONS

__all__ = [
    "DEEPSPEED_LATEST",
    "ORBAX_METADATA",
    "TRAINER_STATE",
    "deepspeed_tag_problem",
    "files_problem",
    "is_deepspeed_tag",
    "orbax_metadata_problem",
    "trainer_problem",
]

TRAINER_STATE = "trainer_state.json"
ORBAX_METADATA = "_CHECKPOINT_METADATA"
# Orbax sets it when it finalizes a save (after every process wrote its part), never before.
_ORBAX_COMMITTED = re.compile(rb'"commit_timestamp_nsecs"\s*:\s*[0-9]')
DEEPSPEED_LATEST = "latest"
# A trainer's checkpoint directory: weights indexes, DeepSpeed's tag pointer and shards.
_INDEX_SUFFIX = ".index.json"
_DEEPSPEED_SHARD = re.compile(r"(?:.*_)?zero_pp_rank_(?P<dp>[0-9]+)_mp_rank_(?P<mp>[0-9]+)_(?P<kind>optim|model)_states\.pt")
_DEEPSPEED_STATES = re.compile(r".*(?:optim|model)_states\.pt")
_DCP_SHARD_SUFFIX = ".distcp"


def is_deepspeed_tag(contents: Sequence[FileFacts]) -> bool:
    """The directory holds DeepSpeed model or ZeRO states at its top."""
    return any(_DEEPSPEED_SHARD.fullmatch(f.name) or f.name == "mp_rank_00_model_states.pt" for f in contents)


def orbax_metadata_problem(metadata: FileFacts) -> str | None:
    """Orbax's ``_CHECKPOINT_METADATA``, the directory's only marker: whole once it records a commit.

    Orbax writes the file with ``init_timestamp_nsecs`` when it creates the step
    directory and adds ``commit_timestamp_nsecs`` when it finalizes the save;
    its first and last bytes are searched, so a large file is judged too.
    """
    if _ORBAX_COMMITTED.search(metadata.head) or _ORBAX_COMMITTED.search(metadata.tail):
        return None
    return f"{ORBAX_METADATA} records no commit_timestamp_nsecs (an Orbax save still being written, or cut off)"


def files_problem(contents: Sequence[FileFacts]) -> str | None:
    """The first file in a checkpoint format that is not whole, with its reason."""
    for facts in sorted(contents, key=lambda f: f.name):
        if PurePosixPath(facts.name).suffix.lstrip(".").lower() in CHECKPOINT_EXTENSIONS:
            problem = structure_problem(facts)
            if problem is not None:
                return f"{facts.name}: {problem}"
    return None


def trainer_problem(contents: Sequence[FileFacts], subdirs: Sequence[str]) -> str | None:
    """A Hugging Face Trainer's ``checkpoint-N``: every part its processes write must be whole.

    trainer_state.json parses; every weights index (``model.safetensors.index.json``)
    names shards that are all there; every file in a checkpoint format passes
    its structure check (rng_state_N.pth of each process, optimizer.pt, shards);
    every torch.distributed.checkpoint directory (FSDP's sharded
    ``pytorch_model_fsdp_0/``, ``optimizer_0/``) has its ``.metadata``; and a
    DeepSpeed save has its ``latest`` tag file naming a tag directory whose
    ZeRO shards cover ranks 0..N with the same files each.
    """
    files = {facts.name: facts for facts in contents}
    state = files.get(TRAINER_STATE)
    if state is not None and state.size == len(state.head) and not _is_json(state.head):
        return f"{TRAINER_STATE} is cut off (not valid JSON)"
    problem = files_problem(contents)
    if problem is not None:
        return problem
    for facts in sorted(contents, key=lambda f: f.name):
        if facts.name.endswith(_INDEX_SUFFIX) and facts.size == len(facts.head):
            problem = _index_problem(facts, files)
            if problem is not None:
                return problem
    for subdir in sorted(subdirs):
        inside = [n for n in files if n.startswith(subdir + "/")]
        if any(n.endswith(_DCP_SHARD_SUFFIX) for n in inside) and f"{subdir}/.metadata" not in files:
            return f"{subdir}: torch.distributed.checkpoint shards without their .metadata"
    return _deepspeed_problem(files, subdirs)


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _index_problem(index: FileFacts, files: dict[str, FileFacts]) -> str | None:
    try:
        weight_map = json.loads(index.head)["weight_map"]
        shards = sorted({str(shard) for shard in weight_map.values()})
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{index.name} is cut off (not a valid weights index)"
    folder = PurePosixPath(index.name).parent
    for shard in shards:
        if str(folder / shard) not in files:
            return f"{index.name} lists {shard}, which is missing"
    return None


def _deepspeed_problem(files: dict[str, FileFacts], subdirs: Sequence[str]) -> str | None:
    """A DeepSpeed save inside a trainer's directory: ``latest`` names a tag whose shards are all there."""
    tags = sorted({d for d in subdirs if any(
        n.startswith(d + "/") and _DEEPSPEED_STATES.fullmatch(PurePosixPath(n).name) for n in files)})
    if not tags:
        return None
    latest = files.get(DEEPSPEED_LATEST)
    tag = latest.head.decode(errors="replace").strip() if latest is not None else None
    if tag not in tags:
        return f"DeepSpeed shards in {', '.join(tags)} but no '{DEEPSPEED_LATEST}' file naming them"
    inside = {n[len(tag) + 1 :]: f for n, f in files.items() if n.startswith(tag + "/")}
    problem = _zero_problem(inside)
    return None if problem is None else f"{tag}: {problem}"


def _zero_problem(files: dict[str, FileFacts]) -> str | None:
    """DeepSpeed's tag directory: ZeRO states of every data-parallel rank, the count its model states hold.

    DeepSpeed's rank 0 writes ``latest`` before the other ranks are known to be
    done, so it is no commit marker; the model states file records
    ``dp_world_size`` (read without unpickling), and each rank writes its own
    ``*zero_pp_rank_R_mp_rank_M_{optim,model}_states.pt``. Without a readable
    world size, the ranks found must run 0..N with the same files each.
    """
    kinds: dict[tuple[str, str], set[int]] = {}
    world: int | None = None
    for name, facts in sorted(files.items()):
        shard = _DEEPSPEED_SHARD.fullmatch(name)
        if shard is not None:
            kinds.setdefault((shard.group("mp"), shard.group("kind")), set()).add(int(shard.group("dp")))
        if world is None and name.endswith("model_states.pt"):
            world = pickled_int(facts.head, "dp_world_size")
    ranks = set().union(*kinds.values()) if kinds else set()
    expected = set(range(world if world is not None else max(ranks, default=-1) + 1))
    for (mp, kind), found in sorted(kinds.items()):
        if found != expected:
            missing = sorted(expected - found)
            if not missing:
                return f"ZeRO {kind} states of rank {max(found)}, beyond dp_world_size {world}"
            return f"ZeRO {kind} states of data-parallel rank {missing[0]} (model-parallel rank {mp}) missing"
    return None


def deepspeed_tag_problem(contents: Sequence[FileFacts]) -> str | None:
    """DeepSpeed's own ``global_stepN/``: every file whole, ZeRO states of every rank."""
    problem = files_problem(contents) or _zero_problem({f.name: f for f in contents})
    return None if problem is None else f"DeepSpeed {problem}"
