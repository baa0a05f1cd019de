"""A training loop that survives a peer's loss in its own process: generations of the process group.

::

    inplace = InPlace(model, optimizer)              # what each step's snapshot holds
    for generation in inplace.generations():         # joins the group; after a failure, the next one
        with generation:                             # a peer lost ends this generation here
            ddp = DistributedDataParallel(model)     # bound to this generation's group
            for step in generation.steps(STEPS):     # from the step after the committed one
                train_step(ddp, batch_for(step))     # the batch is a function of the step alone

Under a launcher that asks for in-place restarts (``ELASTIC_INPLACE_STORE``:
:mod:`elastic.worker.inplace.notice`), each generation is a gloo process group
on the launcher's ``TCPStore`` under the generation's own prefix. A step is
committed when the loop's body finishes it (every ``every`` steps, and the
last): :mod:`elastic.worker.inplace.snapshot` copies the state into host memory.
When the launcher declares the generation over (the notice file), the
:class:`~elastic.worker.inplace.watch.NoticeWatch` thread shuts down the group's
sockets (:mod:`elastic.worker.inplace.sockets`), so a collective in flight
raises; ``with generation:`` swallows that (or the :class:`GenerationOver` a
step boundary raises), the old group is destroyed, the next is joined, the
ranks agree on the latest step all of them hold (the minimum of their latest
commits; a spare holds none), a survivor sends that step's state to the ranks
that lack it, and the loop goes on from the step after it. An exception the
launcher did not announce is the rank's own and propagates.

A warm spare (``ELASTIC_INPLACE_SPARE=1``) runs the script up to
:meth:`InPlace.generations`, imports, model and all, and waits there for the
notice that hands it a lost rank's place; its script takes its rank from the
generation (``dist.get_rank()``), never from its environment.

Without the launcher's variables, :meth:`InPlace.generations` yields one
generation on ``init_process_group``'s usual ``env://`` variables and a
failure propagates, as it would without this module.

Standard library only until :meth:`InPlace.generations` runs (torch is imported there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from types import TracebackType
from typing import Any

from elastic.worker.bootstrap.startup_marks import INPLACE_MARK, mark
from elastic.worker.heartbeat import heartbeat, rebind as rebind_heartbeat
from elastic.worker.inplace.alive import FormingBeat
from elastic.worker.inplace.notice import NOTICE_VAR, Notice, first_notice, is_spare, read_notice, say_ready, store_prefix
from elastic.worker.inplace.snapshot import Snapshot, Snapshots
from elastic.worker.inplace.sockets import shut_down, socket_inodes
from elastic.worker.inplace.watch import INTERVAL_S, NoticeWatch

__all__ = ["NOTICE_WAIT_S", "Generation", "GenerationOver", "InPlace"]

# How long an exception that looks like a broken collective waits for the launcher's word before
# it is taken for the rank's own: the launcher hears of a dead rank within milliseconds, a peer's
# broken socket may be noticed first.
NOTICE_WAIT_S = 5.0
_NO_STEP = 2**62  # what a rank that holds no committed step offers to the agreement


class GenerationOver(Exception):
    """Raised at a step boundary once the launcher declared the rank's generation over."""

    def __init__(self, notice: Notice) -> None:
        super().__init__(f"generation {notice.generation - 1} is over: generation {notice.generation} begins")
        self.notice = notice


class InPlace:
    """Generations of the process group around one ``model`` and ``optimizer`` kept in this process.

    ``step`` is the step the model's state is the state after now (0 for a fresh start, the
    checkpoint's step when the script resumed from disk); ``every`` commits every that many steps
    (and the last); ``timeout_s`` is the process group's timeout (torch's default when ``None``).
    The group is gloo's: leaving a broken NCCL collective (its communicator's ``abort()``) is not
    built yet.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any | None = None,
        *,
        step: int = 0,
        every: int = 1,
        timeout_s: float | None = None,
        notice_wait_s: float = NOTICE_WAIT_S,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every}")
        self._snapshots = Snapshots(model, optimizer)
        self._first_step = step
        self._every = every
        self._keeping = True  # snapshots serve only a launcher that re-forms the world
        self._timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
        self.notice_wait_s = notice_wait_s
        self._notice_path = os.environ.get(NOTICE_VAR) or None

    @property
    def committed_step(self) -> int | None:
        """The latest step committed in this process's memory (``None``: none yet, or outside a launcher)."""
        return self._snapshots.latest_step()

    def generations(self) -> Iterator[Generation]:
        """Each generation this rank takes part in, joined and restored; ends when one ends without
        the launcher announcing the next."""
        spare = is_spare()
        notice = self._wait_for_a_place() if spare else first_notice()
        if notice is not None and not spare:
            mark(INPLACE_MARK)  # the launcher starts the spares once every rank carries it
        if notice is None:
            self._keeping = False
            self._init(None)
            generation = Generation(self, None, self._first_step, NoticeWatch(None, 0, lambda _: None))
            yield generation
            generation.leave()
            return
        if notice.generation == 0:
            self._snapshots.commit(self._first_step)  # a rank joining a later generation holds nothing
        next_notice: Notice | None = notice
        while next_notice is not None:
            generation = self._join(next_notice)
            if generation.next_notice is None:  # joined; else it was over before it began
                yield generation
            generation.leave()
            next_notice = generation.next_notice

    def _wait_for_a_place(self) -> Notice:
        """A warm spare's place: the notice the launcher hands it, waited for as long as it takes
        (the launcher stops a spare it no longer needs). Once waiting, the spare says so beside
        its notice file (:func:`~elastic.worker.inplace.notice.say_ready`): warm, model built.
        Handed its place, it takes on the lost rank's variables (the notice's ``identity``), so its
        heartbeat goes to that rank's file."""
        assert self._notice_path is not None  # is_spare() says so
        say_ready(self._notice_path)
        while (notice := read_notice(self._notice_path)) is None:
            time.sleep(INTERVAL_S)
        os.environ.update(dict(notice.identity))  # the lost rank's variables: its files, its numbers
        rebind_heartbeat()
        return notice

    def _store(self, notice: Notice) -> Any:
        """A connection of the generation's own to the launcher's store: shut down with the group's
        sockets when the generation ends before its join did, so a join waiting for a peer that died
        returns at once."""
        import torch.distributed as dist

        return dist.TCPStore(  # type: ignore[attr-defined]  # re-exported by torch.distributed, not declared so
            notice.store_host, notice.store_port, is_master=False, timeout=self._timeout or timedelta(minutes=30)
        )

    def _init(self, notice: Notice | None, store: Any = None) -> None:
        """Join the process group: ``env://`` without a notice, else the notice's generation on ``store``."""
        import torch.distributed as dist

        options: dict[str, Any] = {} if self._timeout is None else {"timeout": self._timeout}
        if notice is None:
            dist.init_process_group("gloo", **options)
            return
        dist.init_process_group(
            "gloo",
            store=dist.PrefixStore(store_prefix(notice.generation), store),  # type: ignore[attr-defined]
            rank=notice.rank,
            world_size=notice.world_size,
            **options,
        )

    def _join(self, notice: Notice) -> Generation:
        """Join ``notice``'s generation and go back to the agreed step; a generation the launcher
        declared over while it was being joined comes back over (its ``next_notice`` set)."""
        import torch.distributed as dist

        group_sockets: set[str] = set()

        def on_over(_: Notice) -> None:
            shut_down(group_sockets)

        watch = NoticeWatch(self._notice_path, notice.generation, on_over).start()
        # A later generation's join is no training step: beat until its first step is committed.
        alive = FormingBeat().start() if notice.generation > 0 else None
        try:
            before = set(socket_inodes())

            def opened() -> None:  # the generation's sockets so far; shut at once if it is already over
                group_sockets.update(set(socket_inodes()) - before)
                if watch.over() is not None:
                    shut_down(group_sockets)

            store = self._store(notice)
            opened()
            self._init(notice, store)
            opened()
            start = self._agree_and_restore(notice)
        except RuntimeError as error:
            over = Generation(self, notice, self._snapshots.latest_step() or 0, watch, alive)
            if (next_notice := watch.wait(self.notice_wait_s)) is None:
                over.leave()
                raise
            over.next_notice, over.cause = next_notice, error
            return over
        if dist.get_rank() != notice.rank:
            raise RuntimeError(f"joined generation {notice.generation} as rank {dist.get_rank()}, not {notice.rank}")
        return Generation(self, notice, start, watch, alive)

    def _agree_and_restore(self, notice: Notice) -> int:
        """The step every rank of the new generation goes back to, with the state after it in place."""
        import torch
        import torch.distributed as dist

        latest = self._snapshots.latest_step()
        agreed = _all_min(torch, dist, _NO_STEP if latest is None else latest)
        if agreed == _NO_STEP:
            raise RuntimeError(f"no rank of generation {notice.generation} holds a committed step")
        held = self._snapshots.at(agreed)
        source = _all_min(torch, dist, notice.rank if held is not None else notice.world_size)
        if source == notice.world_size:
            raise RuntimeError(f"no rank of generation {notice.generation} holds step {agreed}")
        if _all_min(torch, dist, 1 if held is not None else 0) == 0:  # some rank lacks it: send it
            sent: list[Any] = [held.state if held is not None else None]
            dist.broadcast_object_list(sent, src=source)
            if held is None:
                self._snapshots.adopt(Snapshot(agreed, sent[0]))
        self._snapshots.restore(agreed)
        return agreed

    def _commit(self, step: int, last: int) -> None:
        if self._keeping and (step % self._every == 0 or step == last):
            self._snapshots.commit(step)


def _all_min(torch: Any, dist: Any, value: int) -> int:
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


class Generation:
    """One generation of the process group as this rank takes part in it; a context manager that
    ends it quietly when the launcher declared it over."""

    def __init__(
        self, inplace: InPlace, notice: Notice | None, start_step: int, watch: NoticeWatch,
        reforming: FormingBeat | None = None,
    ) -> None:
        self._inplace = inplace
        self.notice = notice
        self.start_step = start_step
        self._watch = watch
        self._reforming = reforming  # beating until the first committed step (a later generation)
        self.next_notice: Notice | None = None
        self.cause: BaseException | None = None  # what ended it, when the launcher had
        self._left = False

    @property
    def number(self) -> int:
        return 0 if self.notice is None else self.notice.generation

    def announced(self) -> Notice | None:
        """The next generation's notice once the launcher declared this one over (a loop may check it
        to skip work that the end of the generation would waste), else ``None``."""
        return self._watch.over()

    def steps(self, last: int) -> Iterator[int]:
        """The steps from the one after :attr:`start_step` to ``last``; each is committed once the
        loop's body finished it, and told to the launcher as this rank's step (the heartbeat's
        ``step``: its first in a re-formed world says the world formed). Raises
        :class:`GenerationOver` at a step boundary once the launcher declared the generation over."""
        for step in range(self.start_step + 1, last + 1):
            if (notice := self.announced()) is not None:
                raise GenerationOver(notice)
            yield step
            self._inplace._commit(step, last)
            if self._reforming is not None:  # formed: its steps are its signs of life from now on
                self._reforming.stop()
                self._reforming = None
            heartbeat(step=step)

    def __enter__(self) -> Generation:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if error is None or not isinstance(error, Exception):
            return False
        if isinstance(error, GenerationOver):
            notice: Notice | None = error.notice
        elif isinstance(error, RuntimeError):  # how torch's collectives fail
            notice = self._watch.wait(self._inplace.notice_wait_s)
        else:
            notice = self._watch.over()
        if notice is None:
            self.leave()
            return False
        error.__traceback__ = None  # its frames may hold this generation's DDP and its hooks
        self.next_notice, self.cause = notice, error
        return True

    def leave(self) -> None:
        """Stop watching and destroy this generation's process group (once)."""
        if self._left:
            return
        self._left = True
        self._watch.stop()
        if self._reforming is not None:
            self._reforming.stop()
            self._reforming = None
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
