"""Which names in a checkpoint directory are checkpoints, and the step each holds (pure).

A name is *step-shaped* when its step is the number that ends it, after an
explicit step label (``step_100``, ``global_step100``, ``checkpoint-100``,
``iter_0000100``, Lightning's ``epoch=0-step=120``), alone (``100``), or after a
plain word and a separator (``model_100``), unless that number belongs to a
date (``run-2024-12-03``, ``train_20241203``) or follows a word that counts
something other than progress (``config_2``, ``version_3``, ``rank_1``,
``model-00001-of-00004``). A plain file also needs a checkpoint extension
(:data:`CHECKPOINT_EXTENSIONS`, optionally compressed: ``state_100.tar.gz``).
Lightning's ``-vN`` copies (``epoch=0-step=120-v1.ckpt``) hold the same step
and rank above the original.

A user's own layout is named with ``--checkpoint-pattern``: a regular
expression with a named group ``step``, matched against the whole name; it
replaces these rules (temporary and hidden names are still never checkpoints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CHECKPOINT_EXTENSIONS",
    "COMPRESSION_EXTENSIONS",
    "LIGHTNING_LAST",
    "StepName",
    "is_temporary",
    "parse_checkpoint_pattern",
    "parse_name",
]

# Extensions of files that hold model or training state: torch (.pt, .pth,
# .bin, .ckpt, .tar as in ImageNet's checkpoint.pth.tar), safetensors, Flax
# (.msgpack), NumPy (.npz, .npy), Keras/HDF5 (.h5, .hdf5, .keras), pickles
# (.pkl, .pickle, .joblib), PaddlePaddle (.pdparams), GGUF. Not logs, configs,
# JSON or text: those are never a resume point.
CHECKPOINT_EXTENSIONS = frozenset(
    {
        "pt", "pth", "bin", "ckpt", "tar", "safetensors", "msgpack", "npz", "npy", "h5",
        "hdf5", "keras", "pkl", "pickle", "joblib", "pdparams", "gguf",
    }
)
# A compressed checkpoint keeps its own extension before this one (state_100.tar.gz).
COMPRESSION_EXTENSIONS = frozenset({"gz", "tgz", "zst", "xz", "bz2", "lz4"})
# Lightning's ModelCheckpoint(save_last=True): no step in the name; the step is
# read from the file (see elastic.core.checkpoints.formats.lightning_global_step).
LIGHTNING_LAST = "last.ckpt"

_TEMPORARY_EXTENSIONS = frozenset({"tmp", "partial", "incomplete"})
_TEMPORARY_PREFIX = re.compile(r"tmp[_-]", re.IGNORECASE)
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp-"

_LABEL = r"(?:global[_-]?step|steps?|iter(?:ation)?s?|it|checkpoint|ckpt|chkpt|updates?)"
# A step after an explicit label, glued or separated: step100, step_100, global_step100.
_LABELLED = re.compile(rf"(?:[A-Za-z0-9_-]*[_-])?{_LABEL}[_-]?(?P<step>[0-9]+)", re.IGNORECASE)
# A step after any word and a separator: model_100, model_v2_100, state-100.
_WORDED = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9_-]*)[_-](?P<step>[0-9]+)")
_DIGITS = re.compile(r"[0-9]+")
# Words whose number is not progress: configs, versions, ranks and shards, seeds, runs, folds.
_NOT_PROGRESS = frozenset(
    {
        "config", "cfg", "conf", "configuration", "v", "ver", "version", "rank", "shard", "part",
        "of", "seed", "run", "fold", "worker", "node", "gpu", "device", "layer",
    }
)
# A calendar date anywhere in the name: 20241203, 2024-12-03, 2024_12_03.
_DATE = re.compile(r"(?<![0-9])(?:19|20)[0-9]{2}([-_.]?)(?:0[1-9]|1[0-2])\1(?:0[1-9]|[12][0-9]|3[01])(?![0-9])")
# Lightning: key=value parts joined by '-', the step in step=N (else the epoch in epoch=N).
_LIGHTNING_STEP = re.compile(r"(?:^|[-_])step=(?P<step>[0-9]+)(?=[-_]|$)")
_LIGHTNING_EPOCH = re.compile(r"(?:^|[-_])epoch=(?P<step>[0-9]+)(?=[-_]|$)")
# Lightning's copy of an existing name: epoch=0-step=120-v1.
_VERSION_SUFFIX = re.compile(r"-v(?P<version>[0-9]+)$")


@dataclass(frozen=True, order=True)
class StepName:
    """What a checkpoint's name says: its step, and for ``-vN`` copies the copy number."""

    step: int
    version: int = 0


def is_temporary(name: str) -> bool:
    """Hidden, or still being written (``*.tmp``, ``*.partial``, ``tmp-checkpoint-100``, Orbax's tmp)."""
    if not name or name.startswith(".") or _ORBAX_TEMPORARY in name or _TEMPORARY_PREFIX.match(name):
        return True
    return any(part.lower() in _TEMPORARY_EXTENSIONS for part in name.split(".")[1:])


def _split_extensions(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The stem and the checkpoint extensions that end ``name``, or ``None`` if it has none.

    Only known extensions are split off, so a stem may hold dots
    (Lightning's ``epoch=2-step=300-val_loss=0.35.ckpt``).
    """
    parts = name.split(".")
    extensions: list[str] = []
    if len(parts) > 1 and parts[-1].lower() in COMPRESSION_EXTENSIONS:
        extensions.append(parts.pop().lower())
    while len(parts) > 1 and parts[-1].lower() in CHECKPOINT_EXTENSIONS:
        extensions.insert(0, parts.pop().lower())
    if not extensions or extensions[0] in COMPRESSION_EXTENSIONS and extensions[-1] != "tgz":
        return None
    return ".".join(parts), tuple(extensions)


def _stem_step(stem: str) -> StepName | None:
    """The step a stem holds under the built-in rules."""
    version = 0
    if "=" in stem:
        copy = _VERSION_SUFFIX.search(stem)
        if copy is not None:
            version, stem = int(copy.group("version")), stem[: copy.start()]
        found = _LIGHTNING_STEP.search(stem) or _LIGHTNING_EPOCH.search(stem)
        return None if found is None else StepName(int(found.group("step")), version)
    if "." in stem:
        return None
    copy = _VERSION_SUFFIX.search(stem)
    if copy is not None and copy.start() > 0 and stem[copy.start() - 1].isdigit():
        version, stem = int(copy.group("version")), stem[: copy.start()]
    if _DIGITS.fullmatch(stem):
        return StepName(int(stem), version)
    labelled = _LABELLED.fullmatch(stem)
    if labelled is not None:
        return StepName(int(labelled.group("step")), version)
    worded = _WORDED.fullmatch(stem)
    if worded is None or _DATE.search(stem):
        return None
    word = re.split(r"[_-]", worded.group("prefix"))[-1].lower()
    return None if word in _NOT_PROGRESS else StepName(int(worded.group("step")), version)


def parse_name(name: str, *, is_dir: bool, pattern: re.Pattern[str] | None = None) -> StepName | None:
    """The step ``name`` holds as a checkpoint directory (``is_dir``) or file, or ``None``.

    A file needs a checkpoint extension unless ``pattern`` (``--checkpoint-pattern``)
    names the layout; a directory's name has no extension.
    """
    if is_temporary(name):
        return None
    if pattern is not None:
        match = pattern.fullmatch(name)
        step = match.group("step") if match else None
        if step is None or not _DIGITS.fullmatch(step):
            return None
        version = match.groupdict().get("version") if match else None
        return StepName(int(step), int(version) if version and version.isdigit() else 0)
    if is_dir:
        return _stem_step(name)
    split = _split_extensions(name)
    return None if split is None else _stem_step(split[0])


def parse_checkpoint_pattern(text: str) -> re.Pattern[str]:
    """``--checkpoint-pattern``: a regular expression with a named group ``step``."""
    try:
        pattern = re.compile(text)
    except re.error as error:
        raise ValueError(f"must be a regular expression, got {text!r} ({error})") from None
    if "step" not in pattern.groupindex:
        raise ValueError(
            f"must have a named group for the step, like 'weights-(?P<step>[0-9]+)\\.pt', got {text!r}"
        )
    return pattern
