"""Every option of ``elastic run``, declared once, in :data:`OPTIONS`.

One row per option says its flag, what values it takes (a :class:`elastic.core.options.values.Value`,
which is both the parser and the validation), its default, its help, and the
:class:`~elastic.core.options.config.RunConfig` field it sets. From the rows come the argparse
grammar (:mod:`elastic.cli.grammar`), the ``ELASTIC_*`` variable and ``--config``
TOML key of each option and their layering (:mod:`elastic.cli.layering`),
``RunConfig``'s defaults and its validation on construction (:mod:`elastic.core.options.config`),
and the options table of ``docs/reference/command-line.md`` (below, kept equal to that
page by ``tests/unit/test_docs.py``). Adding an option is one row here, plus its use.

Why a table over argparse and dataclasses rather than a library: pydantic with
pydantic-settings would give models, environment and TOML layering, but it is one
more dependency for every user and costs about 0.3 s more at start (measured:
``import pydantic_settings`` 0.31-0.40 s, a two-field pydantic model 0.23 s, against
0.05 s for argparse and dataclasses, and ``import elastic.cli.entry`` is 0.4 s in all),
which every ``python -m elastic run`` pays as launch latency; its errors name the
model field, not the flag, file key or variable, and it draws no ``--help``.
attrs with cattrs validates and structures but parses no command line; cyclopts
draws ``--help`` from type hints but brings rich and attrs and its own error style.
The two parts that a library would supply, a validator per value and layering,
are each a few dozen lines here, with our one-line messages.

What the options say of themselves, ``--help``'s text and the docs' options table:
help texts are written once for both readers:
`` `code` `` and ``[text](#anchor)`` are Markdown in the docs (the anchor's page is in
:data:`DOC_PAGES`), and ``--help`` shows ``'word'``, ``--flag``, plain text or the page's
name. ``python -m elastic.core.options.table`` prints the table; ``tests/unit/test_docs.py``
keeps the page's equal to it.
"""

from __future__ import annotations

import enum
import re
import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic.core.checkpoints.names import parse_checkpoint_pattern
from elastic.core.controller.drain import DEFAULT_FAILURE_GRACE_S
from elastic.core.launch.spec import RANK_VARIABLES
from elastic.core.options.values import (
    BACKOFF,
    COUNT,
    LIMIT,
    LISTEN_PORT,
    MODULES,
    MASTER_PORT,
    MAX_SECONDS_TEXT,
    NODES,
    NOTICE_SIGNAL,
    NPROC,
    PERCENT,
    POSITIVE_INT,
    POSITIVE_SECONDS,
    PREEMPT_SIGNAL,
    RANKS,
    RUN_ID,
    SECONDS,
    TEXT,
    TIMEOUT,
    WINDOW,
    LogFormat,
    Value,
    choice,
)
from elastic.core.policy.restarts import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_MAX_PREEMPTIONS,
    DEFAULT_PREEMPTION_WINDOW_S,
    ExitHang,
)
from elastic.core.diagnosis.signatures import Signature, parse_signature
from elastic.core.inplace.fallback import DEFAULT_REFORM_TIMEOUT_S
from elastic.core.policy.rules import ExitRule, parse_exit_rule
from elastic.core.training.init_hang import FACTOR as INIT_FACTOR
from elastic.core.training.init_hang import FIRST_INIT_S, FLOOR_S as INIT_FLOOR_S, InitTimeout
from elastic.core.training.output_steps import compile_user_pattern
from elastic.core.training.stall import DEFAULT_STALL_FLOOR_S, STALL_K
from elastic.core.training.stragglers import STRAGGLER_MARGIN, STRAGGLER_STEPS, OnStraggler
from elastic.worker.heartbeat import DEFAULT_STARTUP_TIMEOUT_S, HeartbeatSource

__all__ = [
    "ENV_PREFIX", "OPTIONS", "OPTION_PREFIX", "InRunDir", "Option", "env_var", "help_text",
    "markdown_table", "option", "plain",
]

ENV_PREFIX = "ELASTIC_"
OPTION_PREFIX = "ELASTIC_OPTION_"  # for options whose plain name is a rank variable

PATH: Value[Path] = Value("a path", Path, lambda p: isinstance(p, Path))
_PATTERN: Value[re.Pattern[str]] = Value(
    "a compiled regular expression with a named group 'step'", parse_checkpoint_pattern,
    lambda p: isinstance(p, re.Pattern) and "step" in p.groupindex, explains=True,
)


def _progress_pattern(text: str) -> str:
    compile_user_pattern(text)  # its ValueError says what is wrong
    return text


_PROGRESS_PATTERN: Value[str] = Value(
    "a regular expression with a group named 'step' or exactly one group, or 'none'",
    _progress_pattern, lambda s: isinstance(s, str), {"none": "none"}, explains=True,
)
_STALL_TIMEOUT: Value[float | str] = Value(
    f"seconds > 0 and <= {MAX_SECONDS_TEXT}, 'auto' or 'none'", float, POSITIVE_SECONDS.valid,
    {"auto": "auto", "none": "none"},
)
_INIT_TIMEOUT: Value[InitTimeout] = Value(
    f"seconds > 0 and <= {MAX_SECONDS_TEXT}, 'auto' or 'none'",
    lambda text: InitTimeout(float(text), auto=False),
    lambda v: isinstance(v, InitTimeout) and (v.seconds is None or POSITIVE_SECONDS.valid(v.seconds)),
    {"auto": InitTimeout(), "none": InitTimeout(None, auto=False)},
)
_CACHE_DIR: Value[Path | None] = Value(
    "a path or 'none'", Path, lambda p: isinstance(p, Path), {"none": None}
)


class InRunDir(enum.Enum):
    """``--cache-dir`` not given: ``cache/`` in the run directory (argparse's default, not a word)."""

    CACHE = "cache"


_RULE: Value[ExitRule] = Value(
    "ExitRule values (parse_exit_rule('2=fail'))", parse_exit_rule,
    lambda r: isinstance(r, ExitRule), explains=True,
)

def _command_line(text: str) -> tuple[str, ...]:
    try:
        argv = tuple(shlex.split(text))
    except ValueError as error:  # shlex's own: "No closing quotation"
        raise ValueError(f"must be a command line, got {text!r}: {str(error).lower()}") from None
    if not argv:
        raise ValueError(f"must be a command line, got {text!r}")
    return argv


_PREFLIGHT: Value[tuple[str, ...] | None] = Value(
    "a command line (split as a shell would, run without one) or 'none'", _command_line,
    lambda v: isinstance(v, tuple) and bool(v) and all(isinstance(a, str) for a in v), {"none": None},
    explains=True,
)

_SIGNATURE: Value[Signature] = Value(
    "Signature values (parse_signature('MyDataError=deterministic'))", parse_signature,
    lambda s: isinstance(s, Signature), explains=True,
)


def env_var(dest: str) -> str:
    """``max_restarts`` -> ``ELASTIC_MAX_RESTARTS``; ``run_id`` -> ``ELASTIC_OPTION_RUN_ID``.

    The variables elastic sets in ranks are never configuration, so an ``elastic run``
    started inside a rank does not take over the outer run's id or checkpoint directory.
    """
    name = ENV_PREFIX + dest.upper()
    return OPTION_PREFIX + dest.upper() if name in RANK_VARIABLES else name


@dataclass(frozen=True)
class Option:
    """One option: its flag, values, default, help, and the ``RunConfig`` field it sets."""

    flag: str
    help: str
    default_text: str  # the default as people read it (Markdown)
    value: Value[Any] | None = None  # None: a switch, off unless given
    default: Any = None  # the value when the option is not given
    metavar: str | None = None
    repeat: bool = False  # given again, it adds an item; the command line's list replaces others
    field: str | None = None  # the RunConfig field it sets as is; None: the CLI composes it
    short: str | None = None  # a one-letter spelling of the flag (``-v``)

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def key(self) -> str:
        """The ``--config`` TOML key (``max_restarts`` is read too)."""
        return self.flag[2:]

    @property
    def env(self) -> str:
        return env_var(self.dest)

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The words of a choice between words (``--backend``); None for other options."""
        return tuple(self.value.words) if self.value is not None and self.value.only_words else None

    def read(self, text: str) -> Any:
        """What a flag's text stands for, as argparse stores it: a choice stays its word."""
        assert self.value is not None
        parsed = self.value.parse(text)
        return text if self.choices else parsed

    def to_field(self, stored: Any) -> Any:
        """The ``RunConfig`` value of what argparse stored."""
        if self.repeat:
            return tuple(stored)
        if self.choices:
            assert self.value is not None
            return self.value.words[stored]
        return stored

    def allows(self, value: Any) -> bool:
        """Whether ``value`` is one the ``RunConfig`` field may hold."""
        if self.value is None:
            return isinstance(value, bool)
        if value is None and self.default is None:  # not given: off, or decided later
            return True
        if self.repeat:
            return isinstance(value, tuple) and all(self.value.check(item) for item in value)
        return self.value.check(value)

    def allowed(self) -> str:
        if self.value is None:
            return "True or False"
        return f"a tuple of {self.value.allowed}" if self.repeat else self.value.allowed


def option(flag: str) -> Option:
    """The row of ``flag``."""
    return _BY_FLAG[flag]


def _row(flag: str, default_text: str, help: str, **rest: Any) -> Option:
    if rest.get("value") is None:
        rest.setdefault("default", False)  # a switch
    elif "field" not in rest:
        rest["field"] = flag[2:].replace("-", "_")
    return Option(flag, " ".join(help.split()), default_text, **rest)


_SCALE_UP = choice({"never": False, "checkpoint": True})
_ON_OFF = choice({"on": True, "off": False})
_CHOOSE_BACKEND = choice({"auto": "auto", "local": "local", "ray": "ray"})

OPTIONS: tuple[Option, ...] = (
    _row("--config", "none", """read options from a TOML file: keys are option names (`max-restarts = 3`,
       at the top level or under `[run]`, not both), and `command = [...]`; its relative paths are
       relative to its folder (`examples/elastic.toml` is a sample); precedence: command line >
       `ELASTIC_<OPTION>` variables (`ELASTIC_MAX_RESTARTS=3`) > file > defaults, for repeatable
       options too (the command line's list replaces the others); `--run-id` and
       `--checkpoint-dir` read `ELASTIC_OPTION_RUN_ID` and `ELASTIC_OPTION_CHECKPOINT_DIR`, since
       `ELASTIC_RUN_ID` and `ELASTIC_CHECKPOINT_DIR` are set in ranks""",
       value=PATH, metavar="FILE.toml", field=None),
    _row("--nproc-per-node", "`auto`", """ranks per node; `auto` is the node's number of GPUs, or 1
       without GPUs""", value=NPROC, metavar="N|auto", field=None),
    _row("--max-restarts", "`0`", """restarts allowed after failures (exits, crashes, kills); outside
       SIGTERMs (preemptions) have their own budget, `--max-preemptions`""",
       value=COUNT, default=0, metavar="N"),
    _row("--restart-window", "`run`", """count `--max-restarts` over a sliding window of this many
       seconds (Erlang-style restart intensity) instead of the whole run""",
       value=WINDOW, metavar="SECONDS|run", field="restart_window_s"),
    _row("--max-preemptions", f"`{DEFAULT_MAX_PREEMPTIONS}`", """restarts allowed after preemptions
       (outside SIGTERMs, lost nodes) within `--preemption-window`""",
       value=LIMIT, default=DEFAULT_MAX_PREEMPTIONS, metavar="N|unlimited"),
    _row("--preemption-window", f"`{DEFAULT_PREEMPTION_WINDOW_S:g}`", "the window of `--max-preemptions`",
       value=WINDOW, default=DEFAULT_PREEMPTION_WINDOW_S, metavar="SECONDS|run",
       field="preemption_window_s"),
    _row("--on-exit", "none", """a rule for how ranks end, repeatable, first match wins: `CODE`,
       `FIRST-LAST` or a signal name, then `=restart` (counted), `=restart-free` (not counted) or
       `=fail`; e.g. `--on-exit 2=fail --on-exit 75=restart-free --on-exit SIGKILL=restart`. A rule
       that can never match is refused: exit codes 129-192 are read as signals (128+N), so write
       `SIGKILL=fail`, not `137=fail`""",
       value=_RULE, default=[], metavar="SPEC", repeat=True),
    _row("--signature", "none", """a failure signature of your own, repeatable, tried before the built-in
       ones, first match wins (see [Failure signatures](#failure-signatures)): `REGEX=CLASS`, REGEX
       searched in each of a failed rank's last lines, CLASS `deterministic` (stop at once, not
       retried), `transient`, `node` or `symptom`; e.g. `--signature 'MyDataError=deterministic'`.
       REGEX is searched by RE2, in time linear in the line; one that does not compile, matches every
       line, names a line end or needs what RE2 lacks (a backreference, a lookaround) is refused""",
       value=_SIGNATURE, default=[], metavar="REGEX=CLASS", repeat=True, field="signatures"),
    _row("--backoff", "`1:60`", """wait before a restart that follows no progress: exponential from
       INITIAL, with jitter, capped at MAX seconds; the first restart after progress is immediate""",
       value=BACKOFF, default=(1.0, 60.0), metavar="INITIAL:MAX", field="backoff_s"),
    _row("--checkpoint-dir", "none", """where the job writes checkpoints; before each attempt the
       latest complete one is found and handed to the ranks (`ELASTIC_RESUME_FROM`, `{resume_from}`
       in COMMAND)""", value=PATH, metavar="DIR", field=None),
    _row("--checkpoint-pattern", "built-in names", """with `--checkpoint-dir`: what a checkpoint's name
       looks like, a regular expression matched against whole names with a named group `step`,
       e.g. `weights-(?P<step>[0-9]+)\\.pt`; it replaces the built-in names (`step_100`,
       `checkpoint-100`, `ckpt_100.pt`, `epoch=0-step=100.ckpt`, `last.ckpt`, ...)""",
       value=_PATTERN, metavar="REGEX"),
    _row("--cache-dir", "`cache/` in the run directory", """where the ranks' compilation caches live
       across attempts: JAX's persistent cache, torch inductor's and Triton's (see
       [What each rank sees](#what-each-rank-sees)); a variable you set yourself is kept; give a
       shared file system's path so that a replacement node finds what others compiled; `none`
       leaves the frameworks' own defaults""",
       value=_CACHE_DIR, default=InRunDir.CACHE, metavar="DIR|none", field=None),
    _row("--max-no-progress", "off", """a crash loop: stop the run (exit status 76) after K attempts in
       a row that end without a newer checkpoint; needs `--checkpoint-dir`""",
       value=POSITIVE_INT, metavar="K"),
    _row("--grace-period", "`30`", """time ranks get between the stop signal and SIGKILL when the
       launcher is stopped or the world grows (after a failure: `--failure-grace`)""",
       value=SECONDS, default=30.0, metavar="SECONDS", field="grace_period_s"),
    _row("--failure-grace", f"`{DEFAULT_FAILURE_GRACE_S:g}`", """time the surviving ranks get between
       the stop signal and SIGKILL after a rank failed, when their own handler caught the signal, or
       while a checkpoint write is under way on their node or without `--checkpoint-dir`: they are
       collateral, their group is broken, and one that will not exit is otherwise killed at once (see
       [How a run goes](#how-a-run-goes))""",
       value=SECONDS, default=DEFAULT_FAILURE_GRACE_S, metavar="SECONDS", field="failure_grace_s"),
    _row("--notice-signal", "`USR1`", """the signal that tells `elastic run` the job is about to be
       preempted (Slurm: `#SBATCH --signal=B:USR1@120`): every rank is told and sent
       `--preempt-signal`, gets `--grace-period` to save, and the run ends with exit status 75 to be
       requeued (see [Preemption notices](#preemption-notices)); not TERM, INT, HUP, KILL, STOP or
       CHLD""", value=NOTICE_SIGNAL, default=int(signal.SIGUSR1), metavar="SIGNAL"),
    _row("--preempt-signal", "`TERM`", """what ranks are sent on a preemption notice, after
       `elastic.worker.preemption_requested()` turned true; `none` sends nothing (for loops that
       check `preemption_requested()` every step); SIGKILL follows at the notice's deadline""",
       value=PREEMPT_SIGNAL, default=int(signal.SIGTERM), metavar="SIGNAL|none"),
    _row("--heartbeat-timeout", "off", """call a rank hung when it shows no sign of life for this long:
       its node's stacks are dumped (py-spy), it is killed and the group restarts, charged to
       `--max-restarts` (see [Hangs](#hangs))""",
       value=POSITIVE_SECONDS, metavar="SECONDS", field=None),
    _row("--startup-timeout", f"`{DEFAULT_STARTUP_TIMEOUT_S:g}`, or `--heartbeat-timeout` if longer",
       """with `--heartbeat-timeout`: how long a rank may take to its first sign of life""",
       value=POSITIVE_SECONDS, metavar="SECONDS", field=None),
    _row("--heartbeat-source", "`api`", """with `--heartbeat-timeout`, what is a sign of life: `api` is
       a call of `elastic.heartbeat()`, `output` is anything the rank prints""",
       value=choice({s.value: s for s in HeartbeatSource}), field=None),
    _row("--init-timeout", "`auto`", f"""call a rank hung when it entered its distributed initialisation
       (`init_process_group`, `jax.distributed.initialize`) and has not returned for this long: its
       node's stacks are dumped, it is killed and the group restarts, charged as a hang; `auto` is
       {FIRST_INIT_S:g} s until a rank of the run completed one, then the longer of
       {INIT_FLOOR_S:g} s and {INIT_FACTOR:g}× the longest completed on the node; `none` never calls
       it; needs the rank bootstrap (see [Hangs](#hangs))""",
       value=_INIT_TIMEOUT, default=InitTimeout(), metavar="SECONDS|auto|none", field="init_timeout"),
    _row("--progress-pattern", "built-in patterns", """how a rank's output shows its training step: a
       regular expression with a group named `step` (or one group) replaces the built-in patterns
       (Hugging Face and tqdm bars, Lightning, MaxText, torchtitan, Megatron, `step N`); `none`
       reads no steps from the output (`elastic.heartbeat(step=...)` still counts; see
       [Progress and stalls](#progress-and-stalls))""",
       value=_PROGRESS_PATTERN, metavar="REGEX|none", field=None),
    _row("--stall-timeout", "`auto`", f"""once a rank has shown two steps, call it hung (stalled) when
       no higher step comes for this long: `auto` is the longer of `--stall-floor` and
       {STALL_K:g}× its recent p95 step time; a write to `--checkpoint-dir` holds it open; `none`
       never calls a stall""",
       value=_STALL_TIMEOUT, default="auto", metavar="SECONDS|auto|none", field=None),
    _row("--stall-floor", f"`{DEFAULT_STALL_FLOOR_S:g}`", """the shortest window of `--stall-timeout
       auto`""", value=POSITIVE_SECONDS, default=DEFAULT_STALL_FLOOR_S, metavar="SECONDS", field=None),
    _row("--on-straggler", "`warn`", f"""what a straggler leads to (a rank whose mean step time over
       {STRAGGLER_STEPS} steps is at least {STRAGGLER_MARGIN:g}× the median of the others'; see
       [Stragglers](#stragglers)): `warn` journals and reports it; `restart` also drains and runs the
       next attempt without its node when that is faster (a spare node takes its place, or the nodes
       left meet `--nnodes` MIN and outpace the world held to its pace), charged to no budget, else
       warns""",
       value=choice({o.value: o for o in OnStraggler}), default=OnStraggler.WARN.value),
    _row("--exit-timeout", f"`{DEFAULT_EXIT_TIMEOUT_S:g}`", """once a rank has exited 0, call ranks
       still running this long afterwards, and silent as long (no output, heartbeat or checkpoint
       write), exit-hung: their stacks are dumped and they are killed; ranks still working are left
       running (see [Hangs at exit](#hangs-at-exit)); `none` lets them run on forever""",
       value=TIMEOUT, default=DEFAULT_EXIT_TIMEOUT_S, metavar="SECONDS|none", field="exit_timeout_s"),
    _row("--exit-hang", "`restart`", """what an exit hang of ranks with no evidence that they finished
       (they said so with `elastic.heartbeat(done=True)`, their stack was at interpreter exit, or they
       were silent since a last checkpoint their peers exited 0 after; see
       [Hangs at exit](#hangs-at-exit)) amounts to: `restart` is a failure, charged to
       `--max-restarts`, and the group restarts from the latest checkpoint; `succeed` takes a
       peer's exit 0 as proof the job finished""",
       value=choice({h.value: h for h in ExitHang}), default=ExitHang.RESTART.value),
    _row("--run-id", "time and a random suffix", """name of the run, also `TORCHELASTIC_RUN_ID`;
       rerunning a run whose driver died, that was stopped by a signal or that exited 75 continues
       it (one that succeeded or failed is refused)""", value=RUN_ID, metavar="ID", field=None),
    _row("--orphan-lease", "`0` (off)", """how long the ranks outlive a launcher that dies without
       stopping them (SIGKILL, the OOM killer), kept by their spawner: a rerun with the same
       `--run-id` and command within it takes them over as they run (no restart, no step lost),
       else stops them with their grace and starts its own attempt; with no rerun they get the
       stop signal and `--grace-period` to save at its end, and are killed; `0` stops them with
       the launcher; local backend only""", value=SECONDS, default=0.0, metavar="SECONDS",
       field="orphan_lease_s"),
    _row("--run-dir", "`RUNS_DIR/<run-id>`", "where journal, logs and report go",
       value=PATH, metavar="DIR", field=None),
    _row("--runs-dir", "`./elastic-runs`", """the folder of runs: a run's directory is
       `RUNS_DIR/<run-id>` unless `--run-dir` names it; `elastic status`, `logs`, `report`,
       `stack` and `runs` look runs up there too""",
       value=PATH, default=Path("elastic-runs"), metavar="RUNS_DIR", field=None),
    _row("--backend", "`auto`", """where ranks run: `local` is this machine without Ray; `ray` runs one
       node agent per Ray node; `auto` picks `ray` when an address is given (`--address` or
       `RAY_ADDRESS`) or `--nnodes` asks for more than one node, else `local`""",
       value=_CHOOSE_BACKEND, default="auto", field=None),
    _row("--nnodes", "`1`", """nodes to run on (ray backend): start once `MIN` are there, use up to
       `MAX`, continue on the survivors while at least `MIN` remain""",
       value=NODES, default=(1, 1), metavar="N|MIN:MAX", field=None),
    _row("--address", "`RAY_ADDRESS`, a local `ray start` cluster, else an embedded Ray on loopback",
       "Ray cluster to join", value=TEXT, metavar="ADDR"),
    _row("--node-resource", "GPU nodes, or every node without GPUs",
       "use only Ray nodes that have this resource", value=TEXT, metavar="NAME"),
    _row("--scale-up", "`checkpoint`", """when nodes join and fewer than `MAX` of `--nnodes` are in use:
       `checkpoint` drains and relaunches at the larger size after the next new checkpoint (needs
       `--checkpoint-dir`; never charged to a budget), `never` keeps the size""",
       value=_SCALE_UP, default="checkpoint"),
    _row("--scale-up-interval", "`300`", "at most one scale-up per this many seconds",
       value=SECONDS, default=300.0, metavar="SECONDS", field="scale_up_interval_s"),
    _row("--node-wait-timeout", "`300`", """how long to wait for `MIN` nodes, at start and after a node
       is lost""", value=SECONDS, default=300.0, metavar="SECONDS", field="node_wait_timeout_s"),
    _row("--preflight", "none", """a command every node runs before each attempt's ranks start, with the
       environment of its first rank (`ELASTIC_NODE` is its node), e.g. `--preflight 'nvidia-smi -q -d
       ECC'`; split as a shell would, run without one (write `sh -c '...'` for a pipeline). A node
       where it exits non-zero, is killed or outlasts `--preflight-timeout` is excluded for the rest
       of the run, its output in the journal and the summary; with too few nodes left for
       `--nnodes` MIN the run fails before launching anything (exit status 75)""",
       value=_PREFLIGHT, metavar="CMD"),
    _row("--preflight-timeout", "`60`", "how long `--preflight` may run on a node before it counts as failed",
       value=POSITIVE_SECONDS, default=60.0, metavar="SECONDS", field="preflight_timeout_s"),
    _row("--ranks", "`all`", """ranks whose output is echoed on the console: `all`, `none` or a list
       like `0,2-3`; every rank's output is always in its log file""",
       value=RANKS, metavar="LIST", field="echo_ranks"),
    _row("--log-format", "`console`", """how the console says the launcher's events: `console` in words
       for people, terminal or not; `json` one object a line for log shippers (which events:
       `--verbose`, `--quiet`; see [The console](#the-console))""",
       value=choice({f.value: f for f in LogFormat}), default=LogFormat.CONSOLE.value),
    _row("--verbose", "off", """show every launcher event on the console, as the journal has them; by
       default it shows the run's start, each failure and what elastic does about it, warnings and
       the summary""", short="-v"),
    _row("--quiet", "off", """show only warnings, errors and the summary on the console; the journal
       keeps every event either way""", short="-q"),
    _row("--metrics-port", "off", """serve Prometheus metrics at `http://HOST:PORT/metrics` (0: any
       free port, journaled as `metrics_serving`)""", value=LISTEN_PORT, metavar="PORT"),
    _row("--metrics-host", "`127.0.0.1`", "address the metrics endpoint binds; `127.0.0.1` is this machine only",
       value=TEXT, default="127.0.0.1", metavar="HOST"),
    _row("--no-status", "shown", """no live status line (phase, attempt, world, elapsed, the training
       step as the ranks last reported it and the newest complete checkpoint on disk,
       `step 21 · ckpt 20`, restarts left) at the bottom of the terminal; it is shown only when
       stdout and stderr are a terminal"""),
    _row("--isolate-gpus", "off", """give each rank only its own GPU through `CUDA_VISIBLE_DEVICES`
       (and `HIP_VISIBLE_DEVICES` on ROCm)""", field="isolate_gpus"),
    _row("--rank-bootstrap", "`on`", """put elastic's bootstrap first on each rank's `PYTHONPATH`: a bare
       `jax.distributed.initialize()` then joins elastic's world, inside Slurm too, and MaxText's
       command lines run as they are (see [Joining JAX's runtime](#joining-jaxs-runtime)); `off`
       leaves `PYTHONPATH` alone and `JAX_COORDINATOR_ADDRESS` is `host:port`""",
       value=_ON_OFF, default="on"),
    _row("--prewarm", "`none`", """start each rank's next process while the attempt runs, with these
       modules imported (`torch,jax`), so a restart skips the import; only for `python SCRIPT.py`
       and `python -m MODULE` commands, else a cold start (see [Prewarming](#prewarming))""",
       value=MODULES, default=(), metavar="MODULES", field="prewarm"),
    _row("--prewarm-delay", "`30`", """seconds after a rank starts before its warm successor (`--prewarm`)
       starts importing, so the imports do not compete with the attempt's own start-up""",
       value=SECONDS, default=30.0, metavar="SECONDS", field="prewarm_delay_s"),
    _row("--prewarm-memory", "`10`", """without `--prewarm`, each rank's next process is started once the
       rank is past its start-up (its first step, its distributed initialisation returned, or its
       heartbeat) with the installed packages the rank imported by then, so a restart skips the import; warm interpreters started so hold at most this percent of a node's memory; `0`
       turns it off (see [Prewarming](#prewarming))""",
       value=PERCENT, default=10.0, metavar="PERCENT", field="prewarm_memory_pct"),
    _row("--spares", "`0` (off)", """warm spares per node for in-place restarts: the ranks get a
       process-group store hosted apart from them (`ELASTIC_INPLACE_STORE`), and once every rank runs
       on `elastic.worker.inplace` each node starts this many spares of the command, which wait
       there, model built, for a lost rank's place: a rank lost then is replaced by a spare while
       the others keep their processes, a restart counted against `--max-restarts`; local backend only (see
       [In-place restarts](#in-place-restarts))""",
       value=COUNT, default=0, metavar="K", field="spares"),
    _row("--reform-timeout", f"`{DEFAULT_REFORM_TIMEOUT_S:g}`", """with `--spares`: how long a world re-formed
       in place has to show its first step (a survivor stuck outside Python never rejoins) before its
       ranks are stopped and the run restarts as without spares; never less than 3 of the run's slowest
       step times""",
       value=SECONDS, default=DEFAULT_REFORM_TIMEOUT_S, metavar="SECONDS", field="reform_timeout_s"),
    _row("--master-addr", "`127.0.0.1` on one machine", "`MASTER_ADDR` for the ranks",
       value=TEXT, metavar="ADDR"),
    _row("--master-port", "a fresh free port each attempt", "`MASTER_PORT` for the ranks",
       value=MASTER_PORT, metavar="PORT"),
)

_BY_FLAG = {o.flag: o for o in OPTIONS}


_LINK = re.compile(r"\[([^\]]+)\]\(#([^)]+)\)")
_CODE = re.compile(r"`([^`]+)`")
_WORD = re.compile(r"[a-z][a-z -]*")

# The documentation page (under docs/) that holds each section a help text links to as
# [text](#anchor); tests/unit/test_docs_site.py checks that each page has its anchor.
TABLE_PAGE = "reference/command-line.md"  # where the options table is, in docs/
DOC_PAGES = {
    "failure-signatures": "failures/signatures.md",
    "hangs": "failures/hangs.md",
    "hangs-at-exit": "failures/exit-hangs.md",
    "how-a-run-goes": "failures/index.md",
    "joining-jaxs-runtime": "getting-started/jax-orbax.md",
    "preemption-notices": "failures/preemption.md",
    "in-place-restarts": "operating/in-place-restarts.md",
    "prewarming": "operating/prewarming.md",
    "progress-and-stalls": "failures/stalls.md",
    "stragglers": "failures/stragglers.md",
    "the-console": TABLE_PAGE,
    "what-each-rank-sees": "reference/environment.md",
}


def plain(text: str, *, quote: bool = True) -> str:
    """Help text for a terminal: ``[Hangs](#hangs)`` -> ``'Hangs' in docs/failures/hangs.md``;
    `` `auto` `` -> ``'auto'``."""
    text = _LINK.sub(lambda m: f"'{m[1]}' in docs/{DOC_PAGES.get(m[2], 'index.md')}", text)
    return _CODE.sub(lambda m: f"'{m[1]}'" if quote and _WORD.fullmatch(m[1]) else m[1], text)


def _page_link(match: re.Match[str]) -> str:
    """``[Hangs](#hangs)`` as a link from the options table's page to the page that holds it."""
    page = DOC_PAGES.get(match[2], TABLE_PAGE)  # an anchor missing here fails the docs' build
    if page == TABLE_PAGE:
        return match[0]
    here, there = TABLE_PAGE.split("/")[:-1], page.split("/")
    same = 0
    while same < len(here) and same < len(there) - 1 and here[same] == there[same]:
        same += 1
    path = "/".join([".."] * (len(here) - same) + there[same:])
    return f"[{match[1]}]({path}#{match[2]})"


def help_text(opt: Option) -> str:
    """What ``--help`` says of ``opt``."""
    if opt.value is None:
        return plain(opt.help)
    one_value = _CODE.fullmatch(opt.default_text) is not None  # `auto`: shown bare, as argparse does
    return f"{plain(opt.help)} (default: {plain(opt.default_text, quote=not one_value)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(options: Sequence[Option] = OPTIONS) -> str:
    """The options table of docs/reference/command-line.md, its links to the pages that explain."""
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for opt in options:
        shown = opt.flag
        if opt.choices:
            shown += " " + "|".join(opt.choices)
        elif opt.metavar:
            shown += " " + opt.metavar
        spelled = f"`{_cell(shown)}`" + (f", `{opt.short}`" if opt.short else "")
        rows.append(f"| {spelled} | {_cell(_LINK.sub(_page_link, opt.help))} | {_cell(opt.default_text)} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m elastic.core.options.table: the docs' table, to paste
    print(markdown_table(), end="")

