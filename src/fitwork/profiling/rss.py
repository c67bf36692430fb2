"""Peak resident memory of this process: the kernel's high-water mark and its rise since a start."""

from __future__ import annotations

import resource
from collections.abc import Callable


def _rss_now() -> int:
    """This process's resident bytes now."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_since_start() -> Callable[[], int]:
    """Starts counting this process's peak RSS from now; the returned call gives the bytes
    it rose to above where it was.  A forked child starts with its parent's high-water
    mark, so the mark is lowered first (``ru_maxrss`` where the kernel refuses: an
    overcount by whatever the parent once held beyond what it held at the fork)."""
    start = _rss_now()
    reset = reset_high_water()

    def peak() -> int:
        high = high_water() if reset else None
        return max(0, (high if high is not None else _rss()) - start)

    return peak


def _status_bytes(field: str) -> int | None:
    """A ``kB`` figure of /proc/self/status (``VmHWM``) in bytes; ``None``
    where there is no such file (not Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_high_water() -> bool:
    """Lower this process's peak RSS to its RSS now (Linux's ``clear_refs`` 5); whether the
    kernel let it (where not, no call memory is measured)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def high_water() -> int | None:
    """This process's peak RSS since the last `reset_high_water`."""
    return _status_bytes("VmHWM")
