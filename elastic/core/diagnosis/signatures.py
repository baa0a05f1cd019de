"""Failure signatures: a table of rules over what a rank said, and the one matcher. Pure.

Each rule (:class:`Signature`) reads the last lines of a rank's output (the log tail the
node already reads at a failure, :attr:`elastic.core.failures.WorkerExit.log_tail`), the
exception its error file holds (torch's ``@record``) and its exit status, and gives the
failure a stable id (``import-error``, ``nccl-timeout``) and a :class:`FailureClass`:
``deterministic`` (a restart cannot help: the run stops at once), ``transient`` (restart
as usual), ``node`` (the node is at fault) or ``symptom`` (the consequence of another
rank's failure, never the root cause while one explains it).

Rules are tried in order, users' own first (:func:`parse_signature`), and the first that
matches wins; within a rule the latest line wins. Matching is bounded: only the tail
(at most :data:`elastic.node.logs.tail.TAIL_LINES` lines, whatever the log's size), each
line at its first and last :data:`LINE_CAP` characters, and a built-in rule's pattern is
tried only on lines that hold one of its ``keys`` (plain substrings, found at C speed).
A user's pattern (``--signature``) is searched by RE2 (``google-re2``), in time linear in the
line whatever the pattern (``E.*r.*r.*o.*r.*!`` takes Python's ``re`` minutes on a few hundred
characters); one that needs what RE2 lacks (a backreference, a lookaround) is refused when the
run starts.
"""

from __future__ import annotations

import enum
import importlib
import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from elastic.core.evidence import LINE_CAP, EndingError, ending_error, normalize

__all__ = [
    "BUILTIN_SIGNATURES", "Diagnosis", "FailureClass", "Signature", "diagnose", "diagnosis_from", "parse_signature",
    "uncaught_diagnosis",
]

# The matched line as reports show it, at most.
_SHOWN_CHARS = 500


class FailureClass(enum.Enum):
    """What a signature says about restarting (docs/failures/signatures.md argues each built-in's)."""

    DETERMINISTIC = "deterministic"  # the same workload fails the same way: stop now
    TRANSIENT = "transient"  # a restart is likely to pass: restart as usual
    NODE = "node"  # the node (GPU, host) is at fault
    SYMPTOM = "symptom"  # a consequence of another rank's failure
    UNKNOWN = "unknown"  # no rule knows it (a plain exception): restart as usual


@dataclass(frozen=True)
class Diagnosis:
    """A failure's signature: which rule matched, its class, and the line it matched."""

    signature: str
    failure_class: FailureClass
    line: str
    hint: str = ""  # what to do about it, when the rule knows (:attr:`Signature.hint`)

    def fields(self) -> dict[str, str]:
        """As journaled and in ``report.json``: ``{"signature", "class", "line"}``, and ``"hint"``
        when the rule has one."""
        fields = {"signature": self.signature, "class": self.failure_class.value, "line": self.line}
        if self.hint:
            fields["hint"] = self.hint
        return fields

    def describe(self) -> str:
        """``import-error (deterministic): ModuleNotFoundError: No module named 'x'``."""
        return f"{self.signature} ({self.failure_class.value}): {self.line}"


def diagnosis_from(fields: object) -> Diagnosis | None:
    """A journaled diagnosis as a value; ``None`` for anything else (an older journal, a class
    this version does not know)."""
    if not isinstance(fields, dict):
        return None
    try:
        failure_class = FailureClass(str(fields.get("class")))
    except ValueError:
        return None
    signature, line, hint = fields.get("signature"), fields.get("line"), fields.get("hint")
    if not isinstance(signature, str) or not isinstance(line, str):
        return None
    return Diagnosis(signature, failure_class, line, hint if isinstance(hint, str) else "")


class _Searcher(Protocol):
    """A compiled pattern: Python's ``re.Pattern`` (built-in rules) or RE2's (users' rules)."""

    def search(self, text: str, /) -> object: ...


@dataclass(frozen=True)
class Signature:
    """One rule: a failure whose evidence matches ``pattern`` has id ``id`` and class ``failure_class``.

    ``pattern`` is searched in each normalized line (:func:`normalize`) of the evidence,
    latest first. Conditions narrow it: ``keys`` (a line is tried only if it holds one of
    these plain substrings; none: every line), ``ending`` (only the exception that ended the
    rank, :func:`elastic.core.evidence.ending_error`: a handled traceback earlier is not it),
    ``startup`` (only while the rank was in its start-up, :func:`elastic.core.evidence.past_startup`), ``after_exit_0`` (only after a peer of the attempt exited 0),
    ``exit_code`` / ``signals`` (only an exit with that code, a death by one of those
    signals), ``needs`` (another line must match this too, e.g. argparse's ``usage:``
    line). ``oom_kill``: a death the node saw the kernel's OOM killer cause matches too,
    whatever the text, and how the node knows is the line shown. With ``needs_text`` off the
    conditions alone match: ``pattern`` then only picks the line to show, else the rank's
    last. ``hint``: what to do about it, shown under the signature in the summary (a built-in
    may have one). ``given_gpu``: the class instead (and ``given_gpu_hint`` the hint) for a rank
    the launch plan gave a GPU, or whose GPUs are not known (:func:`diagnose`'s ``gpus``). ``spec``: the user's ``--signature`` text; empty for a built-in. A user's pattern
    is compiled by RE2 (linear-time search, :attr:`engine`), a built-in's by Python's ``re``.
    """

    id: str
    failure_class: FailureClass
    pattern: str
    keys: tuple[str, ...] = ()
    ending: bool = False
    startup: bool = False
    after_exit_0: bool = False
    exit_code: int | None = None
    signals: frozenset[int] = frozenset()
    oom_kill: bool = False
    needs: str | None = None
    needs_text: bool = True
    hint: str = ""
    given_gpu: FailureClass | None = None
    given_gpu_hint: str = ""
    spec: str = ""
    _regex: _Searcher = field(init=False, repr=False, compare=False)
    _needs: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", _linear(self.pattern) if self.spec else re.compile(self.pattern))
        object.__setattr__(self, "_needs", None if self.needs is None else re.compile(self.needs))

    def search(self, line: str) -> bool:
        return self._regex.search(line) is not None

    @property
    def engine(self) -> str:
        """What searches the pattern: ``"re2"`` (a user's rule) or ``"re"`` (a built-in)."""
        return type(self._regex).__module__.partition(".")[0]

    def needed(self, lines: Iterable[str]) -> bool:
        return self._needs is None or any(self._needs.search(line) for line in lines)


def _re2() -> Any:
    """The ``re2`` module (google-re2), imported when a user's rule is first compiled."""
    return importlib.import_module("re2")


def _linear(pattern: str) -> _Searcher:
    """``pattern`` compiled by RE2: its search takes time linear in the line, whatever the pattern.
    Raises ``re2.error`` for what RE2 lacks; it logs nothing (its own logging is turned off)."""
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False
    return cast(_Searcher, re2.compile(pattern, options))


_D, _T, _N, _S = FailureClass.DETERMINISTIC, FailureClass.TRANSIENT, FailureClass.NODE, FailureClass.SYMPTOM
_EXC = r"^(?:[A-Za-z_][\w.]*\.)?"  # an exception's module path, as in torch.OutOfMemoryError
_XID = r"NVRM: Xid \((?:PCI:)?[0-9A-Fa-f:.]*\): "

# The built-in table, in matching order: the node's hardware first (a broken GPU makes any
# code fail), then what no restart fixes, what a restart may fix, and last what only
# reports another rank's failure. Texts and sources: docs/failures/signatures.md.
BUILTIN_SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "ecc-error", _N,
        r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE|"
        + _XID + r"(?:48|63|64|94|95),",
        keys=("ECC", "Xid"),
    ),
    Signature(
        "gpu-lost", _N,
        r"fallen off the bus|hipErrorNoDevice|" + _XID + r"(?:74|79),",
        keys=("fallen off the bus", "hipErrorNoDevice", "Xid"),
    ),
    Signature(
        "import-error", _D, _EXC + r"(?:ModuleNotFoundError|ImportError): ",
        keys=("ModuleNotFoundError", "ImportError"), ending=True, startup=True,
    ),
    Signature(
        "syntax-error", _D, _EXC + r"(?:SyntaxError|IndentationError|TabError): ",
        keys=("SyntaxError", "IndentationError", "TabError"), ending=True,
    ),
    Signature("usage-error", _D, r"^\S+: error: ", keys=(": error: ",), exit_code=2, needs=r"^usage: "),
    Signature(
        "file-not-found", _D, _EXC + r"FileNotFoundError: ",
        keys=("FileNotFoundError",), ending=True, startup=True,
    ),
    # CUDA asked of a torch built without it, or of a node with no GPU to give: the same machine
    # and install fail the same way (torch.cuda.set_device, .cuda(), init_process_group("nccl")).
    Signature(
        "cuda-not-built", _D,
        r"module 'torch\._C' has no attribute '_cuda_\w+'|Torch not compiled with CUDA enabled|"
        r"Distributed package doesn't have NCCL built in",
        keys=("has no attribute '_cuda_", "not compiled with CUDA", "have NCCL built in"), ending=True,
        hint="this torch is a CPU build (no CUDA, no NCCL): use the gloo backend, init_process_group(\"gloo\"), and "
             "drop torch.cuda.set_device and .cuda(); or install a CUDA build of torch on a machine with GPUs",
    ),
    # A rank the launch plan gave a GPU (its node showed some when the attempt was planned) that
    # finds none lost it since: fallen off the bus, a driver that failed. That is the node's fault,
    # and a restart on another node passes; so too where what it was given is not known (one
    # restart too many is the cheaper error than a run stopped that a restart would fix).
    Signature(
        "no-gpu", _D,
        r"No CUDA GPUs are available|Found no NVIDIA driver on your system|"
        r"ProcessGroupNCCL is only supported with GPUs, no GPUs found",
        keys=("No CUDA GPUs", "no NVIDIA driver", "no GPUs found"), ending=True,
        hint="no GPU is visible here (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides them): use the gloo backend, "
             "init_process_group(\"gloo\"), and drop torch.cuda.set_device and .cuda(); or run on a node with GPUs",
        given_gpu=_N,
        given_gpu_hint="this rank was given a GPU but found none: its node's GPU may have fallen off the bus or its "
                       "driver failed (nvidia-smi; dmesg: Xid 79), so the node is suspected and the run restarted, "
                       "without it where another node is free; if it happens on every node, the GPUs are hidden "
                       "from the ranks (a Slurm job without --gres=gpu, CUDA_VISIBLE_DEVICES set in the script)",
    ),
    Signature(
        "cuda-oom", _T,
        r"(?:CUDA|HIP) out of memory\. Tried to allocate|"
        r"RESOURCE_EXHAUSTED: (?:Out of memory while trying to allocate|Failed to allocate request for)|"
        r"CUBLAS_STATUS_ALLOC_FAILED|HSA_STATUS_ERROR_OUT_OF_RESOURCES|Failed to CUDA calloc",
        keys=("out of memory", "RESOURCE_EXHAUSTED", "CUBLAS_STATUS_ALLOC_FAILED", "HSA_STATUS_ERROR_OUT",
              "Failed to CUDA calloc"),
    ),
    Signature(
        "host-oom", _T,
        r"[Oo]ut of memory: Killed process \d+|Detected \d+ oom[-_]kill event|"
        r"Some of the step tasks have been OOM Killed|: tasks? [\d-]+: Out Of Memory|"
        r"OutOfMemoryError: Task was killed due to the node running low on memory|\bOOMKilled\b",
        keys=("Killed process", "oom_kill", "oom-kill", "OOM Killed", "Out Of Memory", "running low on memory",
              "OOMKilled"),
        oom_kill=True,  # or, with no text, the node saw the kernel's OOM killer end it
    ),
    Signature(
        "cuda-error", _T,
        r"(?:CUDA|HIP) error: (?:an illegal memory access was encountered|unspecified launch failure|"
        r"device-side assert triggered|misaligned address|an illegal instruction was encountered)|"
        r"CUDA_ERROR_LAUNCH_FAILED|CUBLAS_STATUS_EXECUTION_FAILED|Memory access fault by GPU node-\d+|"
        r"reason :GPU Hang",
        keys=("CUDA error", "HIP error", "CUDA_ERROR_LAUNCH_FAILED", "CUBLAS_STATUS_EXECUTION_FAILED",
              "Memory access fault by GPU", "GPU Hang"),
    ),
    Signature(
        "disk-full", _T,
        r"\[Errno 28\] No space left on device|\[Errno 122\] Disk quota exceeded|"
        r"PytorchStreamWriter failed writing file",
        keys=("No space left on device", "Disk quota exceeded", "PytorchStreamWriter failed"),
    ),
    Signature(
        "port-in-use", _T,
        r"\bEADDRINUSE\b|errno: 98 - Address already in use|\[Errno 98\] Address already in use",
        keys=("EADDRINUSE", "Address already in use"),
    ),
    Signature(
        "nan-loss", _T,
        r"found (?:NaN|Inf) in local (?:forward loss calculation|grad norm)|"
        r"Unexpected result (?:nan|inf|tensor\(nan)|returned nan values in its \d+th output|"
        r"(?i:(?<![\w])(?:loss|grad(?:ient)?(?: norm)?) (?:is|=|became|went|:) ?[-+]?(?:nan|inf)(?![\w]))",
        keys=("NaN", "nan", "NAN", "Inf", "inf", "INF"),
    ),
    # A crash after a peer's exit 0: the work was done, the rank died on its way out (C++'s
    # "terminate called without an active exception", a segfault in a destructor).
    Signature(
        "teardown", _T,
        r"terminate called without an active exception|"
        r"Fatal Python error: (?:Segmentation fault|Bus error|Illegal instruction|Floating point exception)",
        keys=("terminate called without", "Fatal Python error"), after_exit_0=True, needs_text=False,
        signals=frozenset(int(s) for s in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)),
    ),
    Signature(
        "nccl-timeout", _S,
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, OpType=\w+|"
        r"Some NCCL operations have failed or timed out|we are taking the entire process down|"
        r"Process group watchdog thread terminated with exception|NCCL communicator was aborted on rank \d+|"
        r"NCCL WARN Timeout",
        keys=("Watchdog caught", "NCCL operations have failed", "taking the entire process down",
              "watchdog thread terminated", "communicator was aborted", "NCCL WARN Timeout"),
    ),
    Signature(
        "nccl-error", _S,
        r"ncclSystemError|ncclRemoteError|ncclInternalError|remote process exited or there was a network error|"
        r"unhandled system error|NET/IB : Got completion from peer",
        keys=("ncclSystemError", "ncclRemoteError", "ncclInternalError", "remote process exited",
              "unhandled system error", "NET/IB"),
    ),
    # A gloo peer gone: its socket closed or reset under a collective, or a recv that timed out.
    Signature(
        "gloo-error", _S,
        r"(?:gloo|DistNetworkError|DistBackendError).*(?:Connection closed by peer|Connection reset by peer|"
        r"Timed out waiting \d+ms for (?:recv|send) operation|Socket Timeout)",
        keys=("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "Socket Timeout"),
    ),
    Signature(
        "coordinator-heartbeat", _S,
        r"Terminating process because the (?:JAX distributed service detected fatal errors|"
        r"coordinator detected missing heartbeats)|\(stopped sending heartbeats\)|"
        r"heartbeat timeout\. This indicates that the remote task has failed",
        keys=("Terminating process because", "stopped sending heartbeats", "heartbeat timeout"),
    ),
)

class Unread(enum.Enum):
    """The ending exception not read yet: :func:`diagnose` reads it from the lines it is given."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD

# Advice PyTorch prints after a CUDA or HIP error (and their search hint): never the line a
# failure is known by, though they name the error too.
_ADVICE = ("Search for `", "CUDA kernel errors might be", "HIP kernel errors might be", "For debugging consider passing",
           "Compile with `TORCH_USE_")


def diagnose(
    lines: Sequence[str],
    *,
    exit_code: int | None,
    signal: int | None,
    started: bool,
    rules: Sequence[Signature] = BUILTIN_SIGNATURES,
    after_exit_0: bool = False,
    oom_kill: str | None = None,
    ending: EndingError | None | Unread = UNREAD,
    gpus: int | None = None,
) -> Diagnosis | None:
    """The first rule of ``rules`` that the evidence matches, or ``None``.

    ``lines``: the rank's log tail, then the message of its error file, if any (the latest
    last). ``exit_code``/``signal``: how it ended (one of them, or neither for a lost node).
    ``started``: the rank was past its start-up (:func:`elastic.core.evidence.past_startup`).
    ``after_exit_0``: a peer of the attempt had exited 0. ``oom_kill``: how the node knows the
    kernel's OOM killer ended it. ``ending``: the exception that ended it
    (:func:`elastic.core.evidence.ending_error`), the only line an ``ending`` rule reads; unless
    given, read from ``lines`` and the exit alone. ``gpus``: the GPUs the launch plan gave the rank
    (0: none; None: not known), which a rule's ``given_gpu`` reads.
    """
    if isinstance(ending, Unread):
        ending = ending_error(lines, died_of_signal=signal is not None)
    text = "\n".join(lines)
    normalized: dict[int, str] = {}

    def line_at(index: int) -> str:
        if index not in normalized:
            normalized[index] = normalize(lines[index])
        return normalized[index]

    for rule in rules:
        if rule.exit_code is not None and rule.exit_code != exit_code:
            continue
        if rule.signals and signal not in rule.signals:
            continue
        if (rule.startup and started) or (rule.after_exit_0 and not after_exit_0):
            continue
        if rule.oom_kill and oom_kill is not None:
            return _found(rule, _shown(oom_kill), gpus)
        if rule.ending:
            if ending is not None and (not rule.keys or any(key in ending.line for key in rule.keys)) \
                    and rule.search(normalize(ending.line)):
                return _found(rule, _shown(normalize(ending.line)), gpus)
            continue
        candidates: Iterable[int]
        if rule.keys and not any(key in text for key in rule.keys):
            if rule.needs_text:
                continue
            candidates = ()
        else:
            candidates = range(len(lines) - 1, -1, -1)
        for index in candidates:
            if rule.keys and not any(key in lines[index] for key in rule.keys):
                continue
            line = line_at(index)
            if line.startswith(_ADVICE):
                continue
            if rule.search(line):
                if not rule.needed(line_at(i) for i in range(len(lines))):
                    break
                return _found(rule, _shown(line), gpus)
        if not rule.needs_text:  # the conditions alone: the line shown is the rank's last
            last = next((line_at(i) for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), "")
            return _found(rule, _shown(last), gpus)
    return None


def _found(rule: Signature, line: str, gpus: int | None) -> Diagnosis:
    """``rule``'s diagnosis of ``line``: its ``given_gpu`` class for a rank given a GPU (or not known)."""
    if rule.given_gpu is not None and gpus != 0:
        return Diagnosis(rule.id, rule.given_gpu, line, rule.given_gpu_hint)
    return Diagnosis(rule.id, rule.failure_class, line, rule.hint)


def uncaught_diagnosis(ending: EndingError) -> Diagnosis:
    """A failure no rule knows, ended by an exception: its signature is the exception's name
    (``exception:ValueError``), class ``unknown`` (restarted as usual), its line the exception's."""
    return Diagnosis(f"exception:{ending.name}", FailureClass.UNKNOWN, _shown(normalize(ending.line)))


def _shown(line: str) -> str:
    return line if len(line) <= _SHOWN_CHARS else line[: _SHOWN_CHARS - 1] + "…"


# -- users' own rules: --signature REGEX=CLASS ------------------------------------------


def parse_signature(spec: str) -> Signature:
    """``REGEX=CLASS`` (the last ``=`` splits them); its id is ``user:REGEX``.

    Raises ``ValueError`` naming what is wrong: no ``=``, an unknown class, a regex that
    does not compile, matches every line (it matches the empty string), spans lines (each
    line is matched alone) or needs what RE2, the linear-time engine of users' rules, lacks
    (a backreference, a lookaround); and the page that says what a rule may be.
    """
    try:
        return _parse_signature(spec)
    except ValueError as error:
        raise ValueError(f"{error} (see docs/failures/signatures.md)") from None


def _parse_signature(spec: str) -> Signature:
    pattern, sep, class_text = spec.rpartition("=")
    classes = ", ".join(c.value for c in FailureClass)
    if not sep or not pattern:
        raise ValueError(f"must be REGEX=CLASS like 'MyDataError=deterministic', got {spec!r}")
    try:
        failure_class = FailureClass(class_text)
    except ValueError:
        raise ValueError(f"class {class_text!r} in {spec!r} must be one of {classes}") from None
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ValueError(f"regex {pattern!r} in {spec!r} does not compile: {error}") from None
    if regex.search(""):
        raise ValueError(f"regex {pattern!r} in {spec!r} matches the empty string, so every line")
    if _newline(pattern):
        raise ValueError(f"regex {pattern!r} in {spec!r} spans lines; each line is matched alone")
    try:
        return Signature(f"user:{pattern}", failure_class, pattern, spec=spec)
    except _re2().error as error:  # Python's re compiled it: a feature RE2 leaves out
        said = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) else error
        raise ValueError(
            f"regex {pattern!r} in {spec!r} needs what --signature's linear-time matching (RE2) lacks, "
            f"such as a backreference or a lookaround ({said}); match the line without it"
        ) from None


def _newline(pattern: str) -> bool:
    """Whether the pattern names a line end (``\\n``): lines are matched one by one, so never."""
    def walk(items: list[Any]) -> bool:
        return any(
            (str(item[0]) == "LITERAL" and item[1] == 10) or any(walk(child) for child in _children(item))
            for item in items
        )
    try:
        return walk(list(_sre_parse().parse(pattern)))
    except re.error:
        return False


def _sre_parse() -> Any:
    try:
        return importlib.import_module("re._parser")  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        return importlib.import_module("sre_parse")


_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _children(item: Any) -> list[list[Any]]:
    """The sub-patterns inside one parsed item."""
    op, arg = str(item[0]), item[1]
    if op in _REPEATS:
        return [list(arg[2])]
    if op == "SUBPATTERN":
        return [list(arg[-1])]
    if op == "BRANCH":
        return [list(branch) for branch in arg[1]]
    if op in ("ASSERT", "ASSERT_NOT"):
        return [list(arg[1])]
    if op == "GROUPREF_EXISTS":
        return [list(part) for part in arg[1:] if part is not None]
    return []
