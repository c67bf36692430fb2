"""Shared-memory frame files: private to the user, unguessable, refused when not ours."""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest

from fitwork import Pipeline, run, unit
from fitwork.engine.local.wire import INLINE_LIMIT, Wire, WireError, shm_dir

BLOB = 3 * INLINE_LIMIT


@unit
def inflate(n: int) -> bytes:
    return bytes([n % 256]) * BLOB


@unit
def weigh(blob: bytes) -> int:
    time.sleep(0.01)  # a slow consumer, so spilled frames wait in the channel a while
    return len(blob) + blob[0]


class Watcher:
    """Polls the shared-memory folder in a thread, noting each fitwork file it sees."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int, bool]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        directory = shm_dir()
        while not self.stop.is_set():
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.startswith("fitwork-") and entry.name not in self.seen:
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        self.seen[entry.name] = (stat.S_IMODE(info.st_mode), info.st_uid,
                                                 stat.S_ISREG(info.st_mode))
            time.sleep(0.0005)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_frames_spilled_in_a_real_run_are_private_unguessable_and_removed(umask: int) -> None:
    previous = os.umask(umask)
    try:
        with Watcher() as watcher:
            result = run(Pipeline(inflate, weigh, name="spill"), range(60))
            outputs = sorted(result)
    finally:
        os.umask(previous)
    assert outputs == sorted(BLOB + n % 256 for n in range(60))
    run_id = result.record.run_id
    mine = {name: seen for name, seen in watcher.seen.items()
            if name.startswith(f"fitwork-{run_id}-")}
    assert mine, "no spilled frame was seen: the test did not exercise shared memory"
    # a worker's frame is written as NAME.w and renamed to NAME once it may be sent
    pattern = re.compile(rf"fitwork-{run_id}-\d+-\d+-[0-9a-f]{{16}}(\.w)?")
    for name, (mode, uid, regular) in mine.items():
        assert pattern.fullmatch(name), name
        assert regular and uid == os.geteuid()
        assert mode == 0o600, f"{name}: mode {mode:04o}"
    frames = {name.removesuffix(".w") for name in mine}
    suffixes = {name.rsplit("-", 1)[1] for name in frames}
    assert len(suffixes) == len(frames)  # 64 random bits each, none repeated
    left = [p.name for p in shm_dir().glob(f"fitwork-{run_id}-*")]
    assert left == []


def test_a_file_planted_under_a_predictable_name_cannot_block_or_feed_a_run() -> None:
    wire = Wire(f"fitwork-test{os.getpid()}")
    planted = wire.directory / f"{wire.prefix}-{os.getpid()}-0"
    planted.write_bytes(b"planted")
    try:
        data, _ = wire.dumps(b"x" * (2 * INLINE_LIMIT))
        assert data[:1] == b"S" and data[1:].decode() != planted.name
        assert wire.loads(data)[0] == b"x" * (2 * INLINE_LIMIT)
    finally:
        planted.unlink()


def spilled_name(wire: Wire, tag: str) -> str:
    return f"{wire.prefix}-{os.getpid()}-{tag}-{os.urandom(8).hex()}"


def test_receiver_refuses_a_file_other_users_can_read_or_write(tmp_path: Path) -> None:
    wire = Wire(f"fitwork-test{os.getpid()}")
    data, _ = wire.dumps(b"y" * (2 * INLINE_LIMIT))
    path = wire.directory / data[1:].decode()
    os.chmod(path, 0o644)
    with pytest.raises(WireError, match="mode 0644 lets other users in"):
        wire.loads(data)
    assert path.exists()  # left for the sweep, never unpickled
    assert wire.sweep() == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_receiver_refuses_a_file_another_user_owns() -> None:
    wire = Wire(f"fitwork-test{os.getpid()}")
    data, _ = wire.dumps(b"z" * (2 * INLINE_LIMIT))
    path = wire.directory / data[1:].decode()
    os.chown(path, 65534, 65534)
    with pytest.raises(WireError, match="owned by uid 65534"):
        wire.loads(data)
    assert wire.sweep() == 1


def test_receiver_follows_no_link_and_no_name_outside_the_run(tmp_path: Path) -> None:
    wire = Wire(f"fitwork-test{os.getpid()}")
    target = tmp_path / "elsewhere"
    target.write_bytes(b"\x00" * 64)
    link = wire.directory / spilled_name(wire, "link")
    link.symlink_to(target)
    try:
        with pytest.raises(WireError, match="cannot open"):
            wire.loads(b"S" + link.name.encode())
    finally:
        link.unlink()
    for name in (f"../..{tmp_path}/elsewhere", f"{wire.prefix}-1-2-x/../../{tmp_path}",
                 "fitwork-another-run-1-2-0011223344556677"):
        with pytest.raises(WireError, match="not one of this run's files"):
            wire.loads(b"S" + name.encode())
    assert target.exists()
