"""Sharded sources and sinks: replicas read shards and write parts, the driver keeps books."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import fitwork
from fitwork.engine.parts import MANIFEST, read_parts
from fitwork.io.shards import Shard, Source, file_shards, read_shard
from tests.engine import shard_units as s

PAD = "x" * 120  # wide rows, so the driver's own traffic is small beside the data


def write_inputs(directory: Path, parquet: bool = True) -> int:
    """Three JSON Lines files, a CSV file and (with pyarrow) a Parquet file of rows
    ``{"n": i}``; how many rows in all."""
    directory.mkdir()
    n = 0
    for k in range(3):
        lines = [json.dumps({"n": i, "pad": PAD}) for i in range(n, n + 3000)]
        (directory / f"part{k}.jsonl").write_text("\n".join(lines) + "\n")
        n += 3000
    (directory / "more.csv").write_text(
        "n,pad\n" + "".join(f"{i},{PAD}\n" for i in range(n, n + 1000)))
    n += 1000
    if parquet:
        import pyarrow
        import pyarrow.parquet

        table = pyarrow.table({"n": list(range(n, n + 2000)), "pad": [PAD] * 2000})
        pyarrow.parquet.write_table(table, directory / "last.parquet", row_group_size=250)
        n += 2000
    return n


def pairs(directory: Path) -> Counter[tuple[int, int]]:
    return Counter((int(r["n"]), int(r["part"])) for r in read_parts(directory))


@pytest.mark.parametrize("cut", [1, 7, 64, 1000])
def test_byte_ranges_hold_every_line_once(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "a.jsonl"
    lines = [json.dumps({"n": i, "pad": "y" * (i % 13)}) for i in range(200)]
    path.write_text("\n".join(lines[:100]) + "\n\n" + "\n".join(lines[100:]))  # no last \n
    rows = [row for shard in file_shards(str(path), cut) for row in read_shard(shard)]
    assert [row["n"] for row in rows] == list(range(200))


def test_parquet_shards_are_runs_of_row_groups(tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "t.parquet"
    parquet.write_table(pyarrow.table({"n": list(range(1000))}), path, row_group_size=100)
    shards = file_shards(str(path), 1)
    assert [(sh.start, sh.stop) for sh in shards] == [(g, g + 1) for g in range(10)]
    assert [r["n"] for sh in shards for r in read_shard(sh)] == list(range(1000))


def test_a_pattern_that_matches_nothing_is_named(tmp_path: Path) -> None:
    with pytest.raises(fitwork.InputError, match=r"nothing-\*\.jsonl: matches no"):
        Source.files(str(tmp_path / "nothing-*.jsonl"))


@pytest.mark.parametrize("engine", ["local", "ray"])
@pytest.mark.parametrize("reader", ["own", "fused"])
def test_rows_reach_the_parts_once_through_kills_of_readers_and_writers(
        engine: str, reader: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``own``: the readers are replicas of their own; ``fused``: nobody set their count,
    so the readers run the first unit too, with its replicas."""
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    else:
        pytest.importorskip("pyarrow")
    count = write_inputs(tmp_path / "in", parquet=engine == "local")
    source = Source.files(str(tmp_path / "in"), split_bytes=40_000)
    out = tmp_path / "out"
    rng = random.Random(3)
    killed: list[int] = []
    with fitwork.run(s.pipeline, source, engine=engine, output=fitwork.Sink.files(out),
                     workers={"read" if reader == "own" else "value": 2,
                              "spread": 2}) as result:
        def kill() -> None:  # a reader and a writer, each mid-shard
            for unit in ("read", "spread", "read", "spread"):
                time.sleep(0.25)
                pids = result.worker_pids(unit)
                if pids:
                    victim = rng.choice(pids)
                    killed.append(victim)
                    os.kill(victim, signal.SIGKILL)

        killer = threading.Thread(target=kill)
        killer.start()
        counts = list(result)  # the outputs are in the parts; these are how many at a time
        killer.join()
    assert all(isinstance(c, int) and c > 0 for c in counts)
    assert sum(counts) == len(s.expected(range(count)))
    assert len(killed) >= 2
    assert pairs(out) == Counter(s.expected(range(count)))
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["rows"] == len(s.expected(range(count)))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST] + [part["name"] for part in manifest["parts"]])  # nothing half written
    assert result.record.items_completed == len(source.shards)
    units = [u.name for u in result.record.units]
    assert units == (["read", "value", "keep", "spread"] if reader == "own"
                     else ["read", "keep", "spread"])


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_row_the_first_unit_fails_in_a_reader_fails_alone(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The reader runs the plain first unit on each row: a row it raises on is that
    unit's dead letter, with its row and place, and every other row of the shard goes on."""
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(
        "".join(json.dumps({"n": i}) + "\n" for i in range(2000)))
    dead = tmp_path / "dead.jsonl"
    source = Source.files(str(tmp_path / "in"), split_bytes=4_000)
    with fitwork.run(s.picky_pipeline, source, engine=engine, dead_letter=dead,
                     output=fitwork.Sink.files(tmp_path / "out")) as result:
        list(result)
    assert [u.name for u in result.record.units] == ["read", "keep", "spread"]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    refused = sorted(letter["input"]["n"] for letter in letters)
    assert refused == [n for n in range(2000) if n % 97 == 0]
    assert all(letter["unit"] == "picky" and "ValueError: no " in letter["error"]
               and len(letter["path"]) == 1 for letter in letters)
    assert pairs(tmp_path / "out") == Counter(
        pair for pair in s.expected(range(2000)) if pair[0] % 97)
    assert result.record.status == "completed"


def test_the_driver_reads_no_item_bytes(tmp_path: Path) -> None:
    """The driver's traffic is shard names out and per-output books back (where each
    output landed), never the rows: making every row ten times wider leaves it as it was."""
    seen = []
    for width in (100, 1000):
        where = tmp_path / str(width)
        where.mkdir()
        (where / "in.jsonl").write_text("".join(
            json.dumps({"n": i, "pad": "x" * width}) + "\n" for i in range(6000)))
        source = Source.files(str(where / "in.jsonl"), split_bytes=200_000)
        with fitwork.run(s.pipeline, source, output=fitwork.Sink.files(where / "out")) as result:
            assert sum(result) == len(s.expected(range(6000)))
            run = result.output.result._run  # the driver's own byte counts
        assert pairs(where / "out") == Counter(s.expected(range(6000)))
        assert run.bytes_from_sink == 0  # no output came through the driver
        seen.append((run.bytes_sent, run.bytes_control, (where / "in.jsonl").stat().st_size))
    (_, back_narrow, data_narrow), (sent_wide, back_wide, data_wide) = seen
    assert data_wide > 8 * data_narrow
    # it fed shard names, not rows: about a name a 200 kB shard (a name is as long as its
    # folder's path, which a deeper temp folder lengthens)
    assert sent_wide < data_wide / 200, seen
    assert back_wide < 1.3 * back_narrow, seen  # what came back does not grow with the rows


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_corrupt_shard_is_dead_lettered_with_its_place_and_the_run_goes_on(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    lines = [json.dumps({"n": i}) for i in range(3000)]
    lines[1500] = '{"n": 1500, oops'
    (source_dir / "a.jsonl").write_text("\n".join(lines) + "\n")
    source = Source.files(str(source_dir / "*.jsonl"), split_bytes=5_000)
    dead = tmp_path / "dead.jsonl"
    with fitwork.run(s.pipeline, source, engine=engine, output=fitwork.Sink.files(tmp_path / "o"),
                     dead_letter=dead) as result:
        list(result)
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert len(letters) == 1 and letters[0]["unit"] == "read"
    bad_at = sum(len(line) + 1 for line in lines[:1500])
    assert f"a.jsonl: line at byte {bad_at}: invalid JSON" in letters[0]["error"]
    bad = next(sh for sh in source.shards if sh.start <= bad_at < sh.stop)
    lost = {json.loads(line)["n"] for line in lines if line.startswith('{"n"') and
            line != lines[1500]} - {r["n"] for r in read_shard(
                Shard(bad.path, "jsonl", 0, bad.start))} - {
        r["n"] for r in read_shard(Shard(bad.path, "jsonl", bad.stop, 10**9))}
    if engine == "local":  # its reader streams: the rows before the fault were handed on
        lost = {n for n in lost if n > 1500}
    got = pairs(tmp_path / "o")
    assert got == Counter(pair for pair in s.expected(range(3000)) if pair[0] not in lost
                          and pair[0] != 1500)


def test_a_csv_sink_writes_a_header_per_part(tmp_path: Path) -> None:
    count = write_inputs(tmp_path / "in", parquet=False)
    with fitwork.run(s.pipeline, Source.files(str(tmp_path / "in" / "*.jsonl")),
                     output=fitwork.Sink.files(tmp_path / "out", format="csv"),
                     workers={"spread": 2}) as result:
        list(result)
    rows = read_parts(tmp_path / "out")
    assert Counter((int(r["n"]), int(r["part"])) for r in rows) == Counter(
        s.expected(range(9000)))
    assert count == 10_000
    for part in (tmp_path / "out").glob("part-*.csv"):
        assert part.read_text().splitlines()[0] == "n,part"


def test_a_resume_keeps_the_journaled_bytes_of_parts_even_once_sealed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fitwork.engine.parts import PartBooks, Sink

    out = tmp_path / "out"
    out.mkdir()
    lines = [json.dumps({"n": i}).encode() + b"\n" for i in range(6)]
    ends = [sum(map(len, lines[:k + 1])) for k in range(6)]
    (out / ".part-aaaa-00001.jsonl.inprogress").write_bytes(b"".join(lines))
    (out / "part-bbbb-00002.jsonl").write_bytes(b"".join(lines))  # sealed, then the crash
    kept = ((".part-aaaa-00001.jsonl.inprogress", ((0, ends[1], 2), (ends[3], ends[4], 1))),
            (".part-bbbb-00002.jsonl.inprogress", ((0, ends[2], 3),)))
    books = PartBooks(Sink(out, kept=kept), "cccc")
    books.prepare()
    manifest = books.seal()
    assert manifest["rows"] == 6
    assert (out / "part-aaaa-00001.jsonl").read_bytes() == lines[0] + lines[1] + lines[4]
    assert (out / "part-bbbb-00002.jsonl").read_bytes() == b"".join(lines[:3])
    assert not (out / ".part-aaaa-00001.jsonl.inprogress").exists()  # gone once sealed
    # killed while sealing, after a gapped part was copied out but before the manifest:
    # its original is still there, so the resume keeps the journal's bytes of it
    (out / ".part-ffff-00004.jsonl.inprogress").write_bytes(b"".join(lines))
    copied = ((".part-ffff-00004.jsonl.inprogress", ((0, ends[0], 1), (ends[1], ends[2], 1))),)
    dying = PartBooks(Sink(out, kept=copied), "gggg")
    dying.prepare()
    real = os.replace

    def killed_at_the_manifest(source: object, target: object) -> None:
        if str(target).endswith("_manifest.json"):
            raise KeyboardInterrupt("killed")
        real(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", killed_at_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        dying.seal()
    monkeypatch.setattr(os, "replace", real)
    assert (out / ".part-ffff-00004.jsonl.inprogress").exists()
    again = PartBooks(Sink(out, kept=copied), "hhhh")
    again.prepare()
    assert again.seal()["rows"] == 2
    assert (out / "part-ffff-00004.jsonl").read_bytes() == lines[0] + lines[2]
    # a part the seal had compacted, its original gone: the journal's ranges do not apply
    (out / "part-dddd-00003.jsonl").write_bytes(lines[0] + lines[2])
    gapped = ((".part-dddd-00003.jsonl.inprogress", ((0, ends[0], 1), (ends[1], ends[2], 1))),)
    with pytest.raises(fitwork.InputError, match="died while sealing part"):
        PartBooks(Sink(out, kept=gapped), "eeee").prepare()
