"""A fork server per stage that lost a worker: it forks that stage's spares, not the driver.

Measured with ``bench/poison.py`` (8 us rows, 0.1% once-killers, driver-fed): forking each
death's spare from the driver cost the driver about 2.5 ms of CPU for the fork itself and
about 1,400 minor page faults after it (296,000 in a run of 202 deaths against 7,600 with
none): every page the driver writes is copied once more after each fork, as long as a
child shares it.  A driver-fed run is bound by its driver, so that cost was the run's.

So once a stage has lost a worker, the driver forks a *zygote* for it, once: a process that
does nothing but fork spares on the driver's word (``b"f"``), each a child of its own that
builds its unit and waits to be handed an id (`fitwork.engine.local.spare.spare_main`).  It
sends the driver each spare's pid with two file descriptors (`socket.send_fds`): the pipe
that hands the spare its id, and a pidfd, which becomes readable when the spare (or the
worker it became) exits, as a `multiprocessing` sentinel does.  The zygote waits for its
children and reports each exit code (``X``); the driver's `Forked` stands for such a child
where it held a `multiprocessing.Process`.  The zygote dies with the driver
(``PR_SET_PDEATHSIG``) and its children with it; told ``b"q"`` it forks no more and exits
once its last child has.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import time
from dataclasses import replace
from typing import Any

from fitwork.engine.local.spare import Spare, spare_main
from fitwork.engine.local.worker import WorkerSpec, prepare_process

_FORKED, _EXITED = b"F", b"X"
_REPORT = struct.Struct("<cqi")  # kind, pid, exit code (0 for a fork)


def zygote_main(spec: WorkerSpec, sock: socket.socket) -> None:
    """The fork server's loop: fork a spare per ``b"f"``, report each child's exit."""
    prepare_process(spec)
    mine = replace(spec, parent_pid=os.getpid())  # its children's parent is this process
    children: dict[int, int] = {}  # pidfd -> pid
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    quitting = False
    while not (quitting and not children):
        for fd, _ in poller.poll():
            if fd != sock.fileno():
                pid = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    sock.send(_REPORT.pack(_EXITED, pid, os.waitstatus_to_exitcode(status)))
                continue
            try:
                word = sock.recv(16)
            except OSError:
                word = b""
            if word == b"f" and not quitting:
                pidfd, pid = _fork_spare(mine, sock, children)
                children[pidfd] = pid
                poller.register(pidfd, select.POLLIN)
            elif word != b"f":  # b"q", or the driver is gone
                quitting = True
                poller.unregister(sock)
    os._exit(0)


def _fork_spare(spec: WorkerSpec, sock: socket.socket,
                children: dict[int, int]) -> tuple[int, int]:
    """Fork one spare; send the driver its pid, its hand-over pipe and a pidfd."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the spare: nothing of the zygote's books is its
        os.close(write)
        sock.close()
        for fd in children:
            os.close(fd)
        try:
            spare_main(spec, read)
        finally:
            os._exit(1)
    os.close(read)
    pidfd = os.pidfd_open(pid)
    with contextlib.suppress(OSError):  # else the driver is gone: so is the spare, at once
        socket.send_fds(sock, [_REPORT.pack(_FORKED, pid, 0)], [write, pidfd])
    os.close(write)
    return pidfd, pid


class Forked:
    """The driver's view of a process its stage's zygote forked, shaped as the parts of
    `multiprocessing.Process` the driver uses: ``pid``, ``sentinel`` (a pidfd),
    ``exitcode`` (once the zygote has reported it), `join`, `close`."""

    def __init__(self, zygote: Zygote, pid: int, pidfd: int) -> None:
        self.zygote, self.pid, self.sentinel = zygote, pid, pidfd

    @property
    def exitcode(self) -> int | None:
        """Its exit code (negative: the signal that killed it), None while it runs or the
        zygote has not yet said.  A zygote that is gone says no more: a process of it that
        has exited unreported died with it (``PR_SET_PDEATHSIG``), as SIGKILL."""
        codes = self.zygote.codes
        if self.pid not in codes:
            self.zygote.collect()
            if self.pid not in codes and self.zygote.gone() and self._exited():
                self.zygote.collect()  # a report sent just before the zygote left
                codes.setdefault(self.pid, -signal.SIGKILL)
        return codes.get(self.pid)

    def _exited(self) -> bool:
        """Whether the process has exited (its pidfd is readable)."""
        if self.sentinel < 0:
            return True
        ready, _, _ = select.select([self.sentinel], [], [], 0)
        return bool(ready)

    def join(self, timeout: float | None = None) -> None:
        """Wait until its exit code is known, at most ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.exitcode is None and not self.zygote.gone():
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return
            select.select([self.zygote.sock], [], [], left)

    def close(self) -> None:
        """Close its pidfd (the driver forgets it)."""
        if self.sentinel >= 0:
            with contextlib.suppress(OSError):
                os.close(self.sentinel)
            self.sentinel = -1


class Zygote:
    """The driver's side of one stage's fork server: ask for spares, take them as they come."""

    def __init__(self, ctx: Any, spec: WorkerSpec) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.spec = spec
        self.process = ctx.Process(target=zygote_main, args=(spec, theirs), daemon=True,
                                   name=f"fitwork-{spec.unit.name}-zygote")
        self.process.start()
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.codes: dict[int, int] = {}  # pid -> exit code, as the zygote reported them
        self.made: list[Spare] = []  # spares forked and not yet taken by the driver
        self.asked = 0  # spares asked for and not yet come
        self.closed = False
        self.ended = False  # its socket reached its end (the driver stops watching it)

    def ask(self) -> None:
        """Ask for one more spare (it comes in `collect`)."""
        with contextlib.suppress(OSError):
            self.sock.send(b"f")
            self.asked += 1

    def collect(self, now: float = 0.0) -> None:
        """Take every report waiting: spares forked (into ``made``), exit codes."""
        while not self.closed:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, _REPORT.size, 2)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the zygote is gone: its socket would read as ready forever
                self.ended = True
                return
            kind, pid, code = _REPORT.unpack(data)
            if kind == _EXITED:
                self.codes[pid] = code
                continue
            self.asked = max(0, self.asked - 1)
            write, pidfd = fds
            self.made.append(Spare(Forked(self, pid, pidfd), write, self.spec,
                                   now or time.monotonic()))

    def gone(self) -> bool:
        """Whether the zygote process has exited (no more reports will come)."""
        return self.process.exitcode is not None

    def fits(self, spec: WorkerSpec) -> bool:
        """Whether spares forked from it can serve as workers of ``spec``."""
        return Spare(self.process, -1, self.spec, 0.0).fits(spec)

    def quit(self) -> None:
        """Fork no more; the zygote exits once its last child has."""
        with contextlib.suppress(OSError):
            self.sock.send(b"q")

    def close(self, timeout: float = 5.0) -> None:
        """Wait for the zygote to leave (killed if it does not), close the socket.  A
        spare it forked after the driver last looked is let go as it comes: its pipe
        closed, it exits, and so can the zygote."""
        self.quit()
        deadline = time.monotonic() + timeout
        while self.process.exitcode is None and time.monotonic() < deadline:
            self.collect()
            while self.made:
                spare = self.made.pop()
                with contextlib.suppress(OSError):
                    os.close(spare.go)
                spare.process.close()
            self.process.join(timeout=0.02)
        if self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.join(timeout=5)
        self.closed = True
        self.sock.close()


__all__ = ["Forked", "Zygote", "zygote_main"]
