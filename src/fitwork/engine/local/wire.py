"""Frames on the wire: small ones inline in a datagram, large ones through a shared-memory file.

Pickle protocol 5 hands over every buffer of 1 MiB or more (numpy arrays) out of band.  When
a frame is large, the sender writes the pickle stream and those buffers, 64-byte aligned, into
one file under ``/dev/shm`` and sends only its name.  The receiver maps the file privately,
unlinks it at once, and rebuilds the arrays as views of the mapping: one copy in total,
against the three or four of pickling through a pipe.  A worker writes the file under a
name ending in ``.w`` and renames it only once it holds a credit to send the name (`ready`):
a worker killed while it waits for one (a slow reader downstream) leaves a ``.w`` file no
datagram names, which the driver removes when it sees that worker die, so a long run with
many kills does not fill ``/dev/shm``::

    sender                       /dev/shm/fitwork-<run>-<pid>-<n>            receiver
    pickle5 ──inline bytes──▶ [header | pickle stream | buf 0 | buf 1 …] ──mmap──▶ views

Every file name starts with the run's prefix and the writer's pid, so the driver can sweep
whatever a killed process left behind, and ends with 64 random bits, so no other user can
guess a name and create the file first.  Files are created exclusively with mode 0600
(narrowed further by the umask); the receiver opens a name only inside this run's prefix,
does not follow a symbolic link, and unpickles only a regular file owned by this user that
no one else may read or write.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import secrets
import stat
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fitwork.errors import EngineError

INLINE_LIMIT = 64 * 1024
OUT_OF_BAND_MIN = 1 << 20
_ALIGN = 64
_INLINE, _SPILLED = b"I", b"S"
_RETRY = {b"i": _INLINE, b"s": _SPILLED}  # the same, for a frame holding a retry
_HEADER = struct.Struct("<QQ")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_WRITING = ".w"


class WireError(EngineError):
    """A spilled frame's file is not this run's private file; it is never unpickled."""


def shm_dir() -> Path:
    """Where shared-memory files live: ``/dev/shm`` on Linux, the temp dir elsewhere."""
    path = Path("/dev/shm")
    return path if path.is_dir() and os.access(path, os.W_OK) else Path(tempfile.gettempdir())


def _aligned(offset: int) -> int:
    return (offset + _ALIGN - 1) // _ALIGN * _ALIGN


class Wire:
    """Encodes and decodes frames for one run; ``prefix`` names its shared-memory files."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.directory = shm_dir()
        self._counter = itertools.count()

    def dumps(self, obj: Any, held: bool = False, retry: bool = False) -> tuple[bytes, int]:
        """The datagram for ``obj`` and the number of bytes it moves in all.  ``held``: a
        spilled file keeps its ``.w`` name until `ready` (call it just before sending).
        ``retry``: its first byte says so (`is_retry`), for a receiver that peeks."""
        data, size = self._dumps(obj, held)
        return (data[:1].lower() + data[1:] if retry else data), size

    def _dumps(self, obj: Any, held: bool) -> tuple[bytes, int]:
        buffers: list[pickle.PickleBuffer] = []

        def keep_inline(buffer: pickle.PickleBuffer) -> bool:
            if buffer.raw().nbytes >= OUT_OF_BAND_MIN:
                buffers.append(buffer)
                return False
            return True

        stream = pickle.dumps(obj, protocol=5, buffer_callback=keep_inline)
        if not buffers and len(stream) < INLINE_LIMIT:
            return _INLINE + stream, len(stream) + 1
        return self._spill(stream, [b.raw() for b in buffers], held)

    def ready(self, data: bytes) -> None:
        """Give a held spilled file the name its datagram carries (inline: nothing to do)."""
        if _RETRY.get(data[:1], data[:1]) == _SPILLED:
            name = data[1:].decode()
            os.rename(self.directory / f"{name}{_WRITING}", self.directory / name)

    def _spill(self, stream: bytes, raws: list[memoryview],
               held: bool) -> tuple[bytes, int]:
        name = f"{self.prefix}-{os.getpid()}-{next(self._counter)}-{secrets.token_hex(8)}"
        sizes = [raw.nbytes for raw in raws]
        header = _HEADER.pack(len(stream), len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)
        offset = _aligned(len(header) + len(stream))
        fd = os.open(self.directory / (f"{name}{_WRITING}" if held else name),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | _NOFOLLOW, 0o600)
        try:
            _write_all(fd, header + stream)
            for raw in raws:
                os.lseek(fd, offset, os.SEEK_SET)
                _write_all(fd, raw)
                offset = _aligned(offset + raw.nbytes)
            os.ftruncate(fd, max(offset, 1))
        finally:
            os.close(fd)
        return _SPILLED + name.encode(), offset

    def loads(self, data: bytes) -> tuple[Any, int]:
        """The object a datagram from `dumps` carries, and the bytes it moved.

        A spilled file is mapped and unlinked here; arrays in it are views of the mapping.
        """
        if _RETRY.get(data[:1], data[:1]) == _INLINE:
            return pickle.loads(memoryview(data)[1:]), len(data)
        path = self._spilled_path(data)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _NOFOLLOW)
        except OSError as exc:
            raise WireError(f"shared-memory frame {path}: cannot open ({exc.strerror}); "
                            "refusing the frame") from None
        try:
            info = os.fstat(fd)
            _check_private(path, info)
            size = info.st_size
            view = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
            os.unlink(path)
        finally:
            os.close(fd)
        memory = memoryview(view)
        stream_len, count = _HEADER.unpack_from(memory, 0)
        sizes = struct.unpack_from(f"<{count}Q", memory, _HEADER.size)
        start = _HEADER.size + 8 * count
        stream = memory[start:start + stream_len]
        offset, buffers = _aligned(start + stream_len), []
        for size_i in sizes:
            buffers.append(memory[offset:offset + size_i])
            offset = _aligned(offset + size_i)
        return pickle.loads(stream, buffers=buffers), size

    @staticmethod
    def is_retry(head: bytes) -> bool:
        """Whether a datagram (its first byte is enough) carries a frame holding a retry."""
        return head[:1] in _RETRY

    def _spilled_path(self, data: bytes) -> Path:
        """The file a spilled datagram names, which must be one of this run's."""
        name = data[1:].decode("utf-8", "replace")
        if not name.startswith(f"{self.prefix}-") or "/" in name or "\0" in name:
            raise WireError(f"shared-memory frame {name!r} is not one of this run's files "
                            f"({self.prefix}-*); refusing the frame")
        return self.directory / name

    def sweep_unsent(self, pid: int) -> int:
        """Remove the files process ``pid`` (dead) was still writing; how many there were."""
        return _unlink(self.directory.glob(f"{self.prefix}-{pid}-*{_WRITING}"))

    def sweep(self) -> int:
        """Remove every file of this run still present; returns how many there were."""
        return _unlink(self.directory.glob(f"{self.prefix}-*"))


def _unlink(paths: Iterable[Path]) -> int:
    """Remove each path that is still there; how many were."""
    removed = 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def _check_private(path: Path, info: os.stat_result) -> None:
    """Refuse a file that is not a regular file of this user's, closed to everyone else."""
    if not stat.S_ISREG(info.st_mode):
        raise WireError(f"shared-memory frame {path}: not a regular file; refusing the frame")
    if info.st_uid != os.geteuid():
        raise WireError(f"shared-memory frame {path}: owned by uid {info.st_uid}, not this "
                        f"user ({os.geteuid()}); refusing to unpickle it")
    if info.st_mode & 0o077:
        raise WireError(f"shared-memory frame {path}: mode {stat.S_IMODE(info.st_mode):04o} "
                        "lets other users in; refusing to unpickle it")


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]
