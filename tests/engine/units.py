"""Module-level units for the engine contract suite (importable by every engine)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import numpy as np

from fitwork import unit


@unit
def double(x: int) -> int:
    return x * 2


@unit(kind="filter")
def multiple_of_three(x: int) -> bool:
    return x % 3 == 0


@unit
def explode(x: int) -> Any:
    for i in range(x % 4):
        yield (x, i)


@unit(batch_size=8, batch_wait=0.02)
def tag_batch(batch: list[Any]) -> list[Any]:
    return [("tagged", item) for item in batch]


@unit
def jitter(x: int) -> int:
    time.sleep((x * 7919 % 13) / 4000)
    return x


@unit(batch_size=8, batch_wait=5.0)
def batch_sizes(batch: list[int]) -> list[tuple[int, int]]:
    return [(x, len(batch)) for x in batch]


@unit(batch_size=8, batch_wait=60.0)
def patient_batches(batch: list[int]) -> list[tuple[int, int]]:
    return [(x, len(batch)) for x in batch]


@unit(batch_size=8, batch_wait=0.01)
def quick_batches(batch: list[int]) -> list[tuple[int, int]]:
    return [(x, len(batch)) for x in batch]


@unit
def fail_on_sevens(x: int) -> int:
    if x % 7 == 0:
        raise ValueError(f"seven divides {x}")
    return x


@unit
def slow_identity(x: int) -> int:
    time.sleep(0.002)
    return x


@unit
def slow_square(x: int) -> int:
    time.sleep(0.002)
    return x * x


@unit
def die_on_13(x: int) -> int:
    if x == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


@unit
def make_array(x: int) -> np.ndarray:
    return np.full(300_000, x, dtype=np.float64)  # 2.4 MB: travels through shared memory


@unit
def array_sum(a: np.ndarray) -> float:
    return float(a.sum())


_lock = threading.Lock()
_active = [0, 0]


@unit(io=8)
def concurrent_sleep(x: int) -> tuple[int, int]:
    with _lock:
        _active[0] += 1
        _active[1] = max(_active[1], _active[0])
    time.sleep(0.05)
    with _lock:
        _active[0] -= 1
        peak = _active[1]
    return x, peak


@unit
async def async_double(x: int) -> int:
    await asyncio.sleep(0.01)
    return x * 2


@unit(replicas=2)
class Counter:
    """A class unit: instantiated once per replica."""

    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{id(self)}"

    def __call__(self, x: int) -> tuple[int, str]:
        time.sleep(0.001)
        return x, self.token


@unit
def pass_array(a: np.ndarray) -> np.ndarray:
    return a


@unit
def slow_array(a: np.ndarray) -> float:
    time.sleep(0.05)
    return float(a[0])


@unit
def big_output(x: int) -> bytes:
    """An output too large to travel inline: every frame of them goes through a file."""
    return bytes([x % 256]) * 100_000


@unit
def slow_first_byte(data: bytes) -> int:
    time.sleep(0.01)
    return data[0]


@unit
def die_once_on_13(item: tuple[int, str]) -> int:
    """Kills its process the first time it sees 13 (``item`` carries a marker file)."""
    x, marker = item
    if x == 13 and not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    return x


@unit
def segfault_on_13(x: int) -> int:
    if x == 13:
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return x


@unit
def unpicklable_on_5(x: int) -> object:
    return threading.Lock() if x == 5 else x


@unit
def fail_with_arrays(x: int) -> np.ndarray:
    if x >= 40:
        raise RuntimeError("broken")
    return np.full(300_000, x, dtype=np.float64)


@unit(gpu=0.5, cpu=1)
def which_gpu(x: int) -> tuple[int, int, str]:
    time.sleep(0.005)  # long enough that every replica takes items
    return x, os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES", "")


@unit
def matrix_work(x: int) -> float:
    a = np.random.default_rng(x).random((400, 400))
    for _ in range(4):
        a = a @ a
        a /= np.abs(a).max()
    return float(a.sum())


@unit(cpu=8, replicas=3)
def big_slow(x: int) -> int:
    """Three replicas of 8 cores each: one more than a 16-core test cluster can place."""
    time.sleep(0.2)
    return x


@unit(cpu=1)
def visible_devices(x: int) -> tuple[int, str]:
    time.sleep(0.005)  # long enough that every replica takes items
    return x, os.environ.get("CUDA_VISIBLE_DEVICES", "")
