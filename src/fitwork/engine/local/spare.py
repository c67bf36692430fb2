"""Spare workers: forked and unit-built ahead, so a death costs a hand-over, not a start.

Once a stage has lost a worker, the driver keeps spares for it (``LocalOptions.spares``,
1 by default): each a process forked with that stage's `WorkerSpec` that builds its unit,
then blocks on a pipe of its own.  The next `Spawn` for the stage writes the new worker's
id into the oldest spare's pipe and that spare serves as that worker (its `Ready` says
when, and what its build cost); the stage's zygote forks the next spare behind it
(`fitwork.engine.local.zygote`; the driver, where a zygote cannot be had).  A spare's
memory is sampled with the workers' (as ``<unit> (spare)``), and one never handed over is
in the run's record as a worker of id -1 with the CPU it spent building its unit
(`Spare.cpu_seconds`, read when the driver lets it go), counted in its unit's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import sys
import traceback
from dataclasses import dataclass, replace
from typing import Any

import psutil

from fitwork.engine.local.worker import Fatal, Worker, WorkerSpec, prepare_process
from fitwork.failure import describe
from fitwork.workload.kernel import Kernel

_ID = struct.Struct("<q")


def spare_main(spec: WorkerSpec, go: int) -> None:
    """A spare's entry point: build the unit, wait for a worker id, then serve as it."""
    prepare_process(spec)
    kernel: Kernel | None = None
    error: tuple[str, str] | None = None
    try:
        kernel = Kernel(spec.unit, given=spec.given)
    except Exception as exc:
        error = (describe(exc), traceback.format_exc())
    data = b""
    while len(data) < _ID.size:
        chunk = os.read(go, _ID.size - len(data))
        if not chunk:  # the driver let it go unused
            os._exit(0)
        data += chunk
    spec = replace(spec, worker_id=_ID.unpack(data)[0])
    worker = Worker(spec)
    if kernel is None:
        assert error is not None
        worker.send(Fatal(spec.worker_id, *error))
        os._exit(3)
    worker.serve(kernel)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclass
class Spare:
    """One forked, waiting spare: its process, the pipe that hands it an id, its spec."""

    process: Any
    go: int
    spec: WorkerSpec
    born: float  # when it was forked (the run's clock)

    def fits(self, spec: WorkerSpec) -> bool:
        """Whether this spare can serve as a worker of ``spec`` (same stage, share, env)."""
        mine = self.spec
        return (mine.stage == spec.stage and mine.given == spec.given and mine.env == spec.env
                and mine.next_replicas == spec.next_replicas
                and self.process.exitcode is None)

    def hand_over(self, worker_id: int) -> None:
        """Make the spare serve as worker ``worker_id``."""
        os.write(self.go, _ID.pack(worker_id))
        os.close(self.go)
        self.go = -1

    def cpu_seconds(self) -> float:
        """CPU seconds it has spent so far (building its unit); 0 once gone."""
        with contextlib.suppress(psutil.Error, OSError):
            times = psutil.Process(self.process.pid).cpu_times()
            return float(times.user + times.system)
        return 0.0

    def close(self) -> None:
        """Stop a spare never handed over."""
        if self.go >= 0:
            with contextlib.suppress(OSError):
                os.close(self.go)
            self.go = -1
        if self.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(timeout=5)
        with contextlib.suppress(ValueError):
            self.process.close()


def fork_spare(ctx: Any, spec: WorkerSpec, now: float) -> Spare:
    """Fork a spare for ``spec``'s stage (its id comes at the hand-over)."""
    read, write = os.pipe()
    process = ctx.Process(target=spare_main, args=(spec, read), daemon=True,
                          name=f"fitwork-{spec.unit.name}-spare")
    process.start()
    os.close(read)
    return Spare(process, write, spec, now)


__all__ = ["Spare", "fork_spare", "spare_main"]
