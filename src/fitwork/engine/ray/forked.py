"""A replica's unit in a child process of its actor: a row that kills it costs a fork, not an actor.

On Ray a replica is an actor, and a row that kills its process (a native decoder's
segfault, an ``os._exit``) kills the actor: the driver then waits for Ray to start a worker
process and the replacement to build its unit, 0.3 to 1.4 s each on this host against a
few milliseconds for the local engine's forked spare (`fitwork.engine.local.zygote`).
Once a unit has lost a replica, the driver starts its replacements *forked*
(`ReplicaSpec.forked`): the actor forks a child that builds the unit and runs the one
replica loop (`fitwork.engine.serving.Serving`, the same as everywhere) over a socket, and
keeps one more child forked and built behind it (none with the engine's ``spares=0``: a
built spare holds as much memory as the unit).  A child that dies fails only the calls
whose frames it had taken (`UnitDied`: the actor reports their items lost, the run core
retries them alone as for any death); frames sent to it that it had not taken yet never
ran, and go to the spare, which takes over at once; a new spare is forked behind it.
Which frames a child took it marks in memory it shares with the actor (`_Mark`), before
it reads each frame and after: a frame whose reading kills the child counts as taken.

The child never touches Ray: it reads frames, runs them, settles them (outputs, returned
weight, dead-letter records, made where the traceback is) and writes the results back with
its busy intervals and CPU time, and it ends with ``os._exit``.  It dies with its actor
(``PR_SET_PDEATHSIG``).  Units that hold a device keep no forked children (a device context
does not survive a fork); the driver decides (`fitwork.engine.ray.spares`).

Wire: each message is a length-prefixed pickle (Ray's cloudpickle, so values of classes
defined in a driver script cross as they came).  Parent to child: ``("frame", n,
segments)``, ``("drain",)``; a closed socket stops the child once it has finished what it
holds.  Child to parent: ``("ready", error, cpu)`` once, then ``("done", n, settled,
intervals, cpu)`` per frame.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from ray import cloudpickle

from fitwork.engine.forking import after_fork
from fitwork.engine.limits import local_gate
from fitwork.engine.segment import Return, Segment, settle
from fitwork.engine.serve import Busy, Runner
from fitwork.engine.serving import DRAIN, IDLE, STOP, Finished, Frame, Serving
from fitwork.failure import Failure, describe
from fitwork.telemetry.cputime import cpu_seconds
from fitwork.workload.allotment import Allotment
from fitwork.workload.kernel import Kernel
from fitwork.workload.unit import Unit

_LENGTH = struct.Struct("<Q")

Settled = list[tuple[Segment | None, Return | None, list[Failure]]]
"""Per segment of a frame: its outputs, the weight it returned, its failures."""


class UnitDied(Exception):
    """The child running a replica's unit died while it held this call's frame.

    ``losses``: per death (its number among the replica's children's: 1, 2, ...), the items
    of the call lost in it, and whether that is the one item it died in (named) or all the
    child held of the frame; ``settled``: what the call's other items came to, run again
    in the next child (empty where the whole frame was lost)."""

    def __init__(self, exitcode: int | None, number: int = 0) -> None:
        self.exitcode = exitcode
        how = ("ended" if exitcode is None else
               f"was killed by {signal.Signals(-exitcode).name}" if exitcode < 0
               else f"exited with code {exitcode}")
        super().__init__(f"the unit's process {how}")
        self.number = number  # which death of its replica's children this is
        self.losses: list[tuple[int, list[Segment], bool]] = []
        self.settled: Settled = []

    def of(self, lost: list[Segment], named: bool = False, settled: Settled | None = None,
           more: Sequence[tuple[int, list[Segment], bool]] = ()) -> UnitDied:
        """This death as one call's: ``lost`` in it (``named``: the one item it died in),
        ``settled`` what else the call came to, ``more`` what it lost in later deaths."""
        died = UnitDied(self.exitcode, self.number)
        died.losses = [(self.number, lost, named), *more]
        died.settled = list(settled or [])
        return died


class Build(NamedTuple):
    """What a child builds its unit from."""

    unit: Unit
    given: Allotment
    max_concurrency: int | None
    rate_limit: float | None
    replicas: int
    spares: int = 1
    """1 or more: a child kept built behind the one that runs; 0: a death forks and builds
    the next one then."""


def send(sock: socket.socket, message: tuple[Any, ...]) -> None:
    """Write one message."""
    data = cloudpickle.dumps(message, protocol=5)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def receive(sock: socket.socket) -> tuple[Any, ...] | None:
    """Read one message; None at the end of the stream (the other side is gone)."""
    head = _read(sock, _LENGTH.size)
    if head is None:
        return None
    body = _read(sock, _LENGTH.unpack(head)[0])
    return None if body is None else cloudpickle.loads(body)


def _read(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except OSError:  # a reset connection among them
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Mark:
    """What a child has taken, in memory shared with its actor (made before the fork): the
    number of the last frame it read, and whether it is reading the next one now."""

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, 24)  # anonymous and shared: the child writes, we read
        self.slots = memoryview(self.memory).cast("q")
        self.slots[2] = -1

    def reading(self) -> None:
        self.slots[1] = 1

    def took(self, number: int) -> None:
        self.slots[0], self.slots[1], self.slots[2] = number, 0, -1

    def running(self, item: int) -> None:
        """The child starts item ``item`` of the frame it took last (counted across its
        segments)."""
        self.slots[2] = item

    def at(self) -> tuple[int, int]:
        """The frame the child took last and the item of it it was running (-1: not known:
        a batch or calls at once, or none started)."""
        return self.slots[0], self.slots[2]

    def taken(self, pending: list[int]) -> set[int]:
        """Which of ``pending`` (sent in this order) the child had taken when it ended:
        those up to the last it read, and the one after while it was reading it."""
        last, reading = self.slots[0], self.slots[1]
        taken = {n for n in pending if n <= last}
        later = [n for n in pending if n > last]
        if reading and later:
            taken.add(min(later))
        return taken


_Cut = tuple[list[Segment], list[Segment], list[Segment]]
"""A frame cut around one item: the segments before it, the item, those after it."""


def cut_at(segments: list[Segment], item: int) -> _Cut | None:
    """A frame cut around its item ``item`` (counted across its segments): the segments
    before it, the item, and after it; None where that cannot be done (no item known, or
    a flat-map's outputs in it, several of which share an input item)."""
    if item < 0 or any(s.paths is not None for s in segments):
        return None
    before: list[Segment] = []
    for index, segment in enumerate(segments):
        size = len(segment.values)
        if item < size:
            head, rest = segment.cut(0, item), segment.cut(item + 1, size)
            after = [rest] if rest.values else []
            return (before + ([head] if head.values else []), [segment.cut(item, item + 1)],
                    after + segments[index + 1:])
        before.append(segment)
        item -= size
    return None


# -- the child ---------------------------------------------------------------------------


class _Socket:
    """The child's transport (`fitwork.engine.serving.Transport`) over its socket."""

    def __init__(self, sock: socket.socket, kernel: Kernel, busy: Busy, mark: _Mark) -> None:
        self.sock, self.kernel, self.busy, self.mark = sock, kernel, busy, mark
        self.waker, self.woken = os.pipe()
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)
        self.poller.register(self.waker, select.POLLIN)

    def take(self, timeout: float | None) -> Frame | str | None:
        wait = IDLE if timeout is None else max(0.0, timeout)
        ready = {fd for fd, _ in self.poller.poll(wait * 1000)}
        if self.waker in ready:
            os.read(self.waker, 4096)
        if self.sock.fileno() not in ready:
            return None
        self.mark.reading()
        message = receive(self.sock)
        if message is None:
            return STOP
        if message[0] == "drain":
            self.mark.took(self.mark.slots[0])
            return DRAIN
        self.mark.took(message[1])
        return Frame(message[1], message[2])

    def finish(self, frames: list[Finished]) -> None:
        for frame in frames:
            settled = [settle(self.kernel, segment, results, failed) for segment, results, failed
                       in zip(frame.segments, frame.results, frame.failed, strict=True)]
            with contextlib.suppress(OSError):  # the actor is gone: this process follows
                send(self.sock, ("done", frame.key, settled, self.busy.take(),
                                 cpu_seconds()))

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.woken, b"w")

    def retry_next(self) -> bool:
        """False: the actor lets a retry in only when no other call is in it."""
        return False


def _child(sock: socket.socket, build: Build, mark: _Mark) -> None:
    """A forked child's life: build the unit, say so, serve frames until told to stop."""
    code = 0
    try:
        gc.freeze()  # the actor's objects stay as they are: shared, never collected here
        after_fork()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        # the thread pools are held already: the actor held them before forking
        try:
            kernel = Kernel(build.unit, None, build.given)
        except Exception as exc:
            send(sock, ("ready", f"{describe(exc)}", cpu_seconds()))
            return
        send(sock, ("ready", None, cpu_seconds()))
        busy = Busy()
        gate = local_gate(build.max_concurrency, build.rate_limit, build.replicas)
        Serving(Runner(kernel, gate, busy), each=mark.running).serve(
            _Socket(sock, kernel, busy, mark))
    except BaseException:  # nothing of the actor's may run in this process
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# -- the actor's side ----------------------------------------------------------------------


class _Kid:
    """One forked child: its pid, its socket, and the CPU it had spent building."""

    def __init__(self, build: Build) -> None:
        mine, theirs = socket.socketpair()
        self.mark = _Mark()
        with warnings.catch_warnings():  # a Ray worker has threads; the child uses none of theirs
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _child(theirs, build, self.mark)
        theirs.close()
        self.pid, self.sock = pid, mine
        self.built_cpu: float | None = None
        self.cpu = 0.0
        self.said: tuple[str | None] | None = None  # what `ready` found

    def ready(self) -> str | None:
        """Wait until the child has built its unit (once; later calls repeat the answer):
        None, or why it could not."""
        if self.said is None:
            message = receive(self.sock)
            if message is None or message[0] != "ready":
                self.said = (f"the unit's process ended while building it "
                             f"({self.reap()})",)
            else:
                self.built_cpu = self.cpu = float(message[2])
                self.said = (message[1],)
        return self.said[0]

    def spent(self) -> float:
        """CPU seconds it spent on items (building left out)."""
        return self.cpu - (self.built_cpu or 0.0)

    def end(self) -> None:
        """Stop it (an idle spare) and reap it in the background."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=self.reap, daemon=True, name="fitwork-reap").start()

    def reap(self) -> UnitDied:
        """Wait for it to end; why it did."""
        self.sock.close()
        try:
            _, status = os.waitpid(self.pid, 0)
            return UnitDied(os.waitstatus_to_exitcode(status))
        except ChildProcessError:
            return UnitDied(None)


class Forked:
    """A replica's unit run in a forked child, with one spare built behind it; the same
    face as `fitwork.engine.serving.Calls` (``call``, ``drain``, ``close``)."""

    def __init__(self, build: Build, busy: Busy) -> None:
        self.build, self.busy = build, busy
        self.lock = threading.Lock()  # the books: pending calls, which child serves
        self.writing = threading.Lock()  # one message at a time on a child's socket
        self.spare: _Kid | None = None
        self.pending: dict[int, tuple[Future[Settled], list[Segment]]] = {}
        self.next = 0
        self.deaths = 0
        self.drained = False
        self.gone_cpu = 0.0  # items' CPU of the children that ended
        self.closed = False
        # Every child is forked by the reader's thread: a child dies with the thread that
        # forked it (``PR_SET_PDEATHSIG``), and that one lives as long as the children do.
        first: Future[_Kid] = Future()
        threading.Thread(target=self._read, args=(first,), daemon=True,
                         name="fitwork-forked").start()
        self.error = first.result().ready()

    def call(self, segments: list[Segment]) -> Future[Settled]:
        """Hand a frame to the child; its future holds the frame settled, or `UnitDied`."""
        future: Future[Settled] = Future()
        self._send(future, segments)
        return future

    def _send(self, future: Future[Settled], segments: list[Segment]) -> None:
        """Write a frame to the child that runs now, numbered in the order frames are
        written (which `_Mark.taken` reads).  Never on the reader's thread: the write is
        not under ``lock``, as a child busy writing results waits for the reader, which
        needs ``lock``, while this write waits for the child to read."""
        with self.writing:
            with self.lock:
                self.next += 1
                number, kid = self.next, self.kid
                self.pending[number] = (future, segments)
            with contextlib.suppress(OSError):  # a dead child: the reader fails or resends it
                send(kid.sock, ("frame", number, segments))

    def drain(self) -> None:
        """Nothing more comes but retries: batches wait no longer (a child that takes over
        later is told too)."""
        with self.lock:
            self.drained, kid = True, self.kid
        with self.writing, contextlib.suppress(OSError):
            send(kid.sock, ("drain",))

    def close(self) -> None:
        """No more calls: the child ends once it has finished what it holds; the spare ends."""
        with self.lock:
            self.closed = True
            with contextlib.suppress(OSError):
                self.kid.sock.shutdown(socket.SHUT_WR)
            spare, self.spare = self.spare, None
        if spare is not None:
            spare.end()

    def cpu_seconds(self) -> float:
        """CPU seconds the children spent on items so far."""
        with self.lock:
            return self.gone_cpu + self.kid.spent()

    def _read(self, first: Future[_Kid]) -> None:
        """The reader's thread: if it fails, the actor ends (the driver replaces it as for
        any death) rather than leave its calls waiting for ever."""
        try:
            self._serve(first)
        except BaseException:
            traceback.print_exc()
            os._exit(1)

    def _serve(self, first: Future[_Kid]) -> None:
        """Results to their calls; a dead child's calls failed and the spare in its place."""
        kid = self.kid = _Kid(self.build)
        kid.ready()
        first.set_result(kid)
        if kid.said != (None,):  # said by `error`: the replica reports it
            kid.reap()
            return
        self._fork_spare()
        while True:
            kid = self.kid
            message = receive(kid.sock)
            if message is not None:
                _, number, settled, intervals, cpu = message
                kid.cpu = cpu
                self.busy.add(intervals)
                with self.lock:
                    held = self.pending.pop(number, None)
                if held is not None:
                    held[0].set_result(settled)
                continue
            if self._died(kid):
                return

    def _died(self, kid: _Kid) -> bool:
        """``kid`` ended: fail the calls whose frames it took, or only the item it died in,
        and hand the rest to the child that takes over; True once the replica is closing."""
        died = kid.reap()
        with self.lock:
            pending, self.pending = self.pending, {}
            taken = kid.mark.taken(sorted(pending))
            self.gone_cpu += kid.spent()
            closing = self.closed
            if not closing:
                self.deaths += 1
                died.number = self.deaths
                self.kid, self.spare = self.spare or _Kid(self.build), None
        last, item = kid.mark.at()
        splits = []
        for number, (future, segments) in pending.items():
            cut = None if closing or number != last else cut_at(segments, item)
            if cut is not None:
                splits.append((future, died, cut))
            elif closing or number in taken:
                future.set_exception(died.of(segments))
        if closing:
            return True
        if self.kid.ready() is not None:  # a fresh child cannot build the unit: the
            os._exit(1)  # actor ends (the driver replaces it as for any death)
        untaken = [pending[n] for n in sorted(pending) if n not in taken]
        threading.Thread(target=self._resend, args=(untaken, splits), daemon=True,
                         name="fitwork-resend").start()
        self._fork_spare()
        return False

    def _resend(self, frames: list[tuple[Future[Settled], list[Segment]]],
                splits: list[tuple[Future[Settled], UnitDied, _Cut]]) -> None:
        """After a death: tell the child that took over that nothing more comes but
        retries, if so, and send it the frames the dead one never took (they never ran).
        A frame it died in, at a known item, loses that item only: the items before it ran
        (their outputs went with the child) and those after never did, so both go to the
        next child, and the call gets what they come to and the item as lost."""
        with self.lock:
            drained, kid = self.drained, self.kid
        if drained:
            with self.writing, contextlib.suppress(OSError):
                send(kid.sock, ("drain",))
        for future, segments in frames:
            self._send(future, segments)
        waits = []
        for future, died, (before, suspect, after) in splits:
            pieces = [(Future(), part) for part in (before, after) if part]
            for piece, part in pieces:
                self._send(piece, part)
            waits.append((future, died, suspect, pieces))
        for future, died, suspect, pieces in waits:
            settled: Settled = []
            more: list[tuple[int, list[Segment], bool]] = []
            for piece, _ in pieces:
                try:
                    settled.extend(piece.result())
                except UnitDied as again:  # a later death took more of it
                    settled.extend(again.settled)
                    more.extend(again.losses)
            future.set_exception(died.of(suspect, named=True, settled=settled, more=more))

    def _fork_spare(self) -> None:
        """Fork the next child to build behind the one that runs (none with ``spares`` 0)."""
        if self.build.spares < 1:
            return
        spare: _Kid | None = _Kid(self.build)
        with self.lock:
            if not self.closed:
                spare, self.spare = None, spare
        if spare is not None:
            spare.end()


__all__ = ["Build", "Forked", "Settled", "UnitDied"]
