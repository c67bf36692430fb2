"""Tolerant reading: --bad-input dead-letter sends unreadable lines, rows and row groups to
the dead letters with their place and goes on; a run stopped at a bad line resumes once
the line is repaired."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import fitwork
import fitwork.io.inputs
from fitwork import Pipeline, unit
from fitwork.errors import InputError
from fitwork.io.inputs import read_items
from fitwork.io.journal import JOURNAL_FILE, Journal, JournalError, identity, load
from fitwork.io.unreadable import Unreadable

PIPELINE = """
import time
from fitwork import Pipeline, unit

@unit(cpu=0.5)
def double(row):
    time.sleep(float(row.get("pause", 0)) if isinstance(row, dict) else 0)
    return {"n": int(row["n"]), "twice": 2 * int(row["n"])}

pipeline = Pipeline(double, name="double")
"""


def cli(project: Path, source: str, output: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fitwork.cli", "run", "job.py:pipeline", "--input", source,
         "--output", output, "-q", *extra],
        cwd=project, capture_output=True, text=True, timeout=300)


def outputs(path: Path) -> Counter[int]:
    return Counter(json.loads(line)["n"] for line in path.read_text().splitlines())


def dead_letters(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "job.py").write_text(PIPELINE)
    return tmp_path


def jsonl_with_bad_lines(path: Path, count: int, bad: dict[int, bytes],
                         pause: float = 0.0) -> dict[int, int]:
    """Write ``count`` lines, ``bad`` replacing some; the byte offset of each bad line."""
    extra = f', "pause": {pause}' if pause else ""
    lines = [bad.get(i, f'{{"n": {i}{extra}}}\n'.encode()) for i in range(count)]
    path.write_bytes(b"".join(lines))
    starts, at = {}, 0
    for i, line in enumerate(lines):
        if i in bad:
            starts[i] = at
        at += len(line)
    return starts


BAD = {100: b'{"n": 100,,}\n', 377: b'{"n": "\xff\xfe"}\n'}


def test_bad_json_lines_stop_by_default_and_go_to_the_dead_letters_when_asked(
        project: Path) -> None:
    starts = jsonl_with_bad_lines(project / "in.jsonl", 500, BAD)
    stopped = cli(project, "in.jsonl", "a.jsonl")
    assert stopped.returncode != 0
    assert len(stopped.stderr.strip().splitlines()) == 1, stopped.stderr
    assert "input in.jsonl:101: invalid JSON" in stopped.stderr
    assert "Traceback" not in stopped.stderr

    went_on = cli(project, "in.jsonl", "b.jsonl", "--bad-input", "dead-letter",
                  "--max-failures", "2")
    assert went_on.returncode == 0, went_on.stderr
    assert outputs(project / "b.jsonl") == Counter(i for i in range(500) if i not in BAD)
    letters = dead_letters(project / "b.jsonl.dead-letters.jsonl")
    assert sorted(d["item"] for d in letters) == [100, 377]
    for letter in letters:
        index = letter["item"]
        place = letter["input"]
        assert letter["unit"] == "read" and letter["kind"] == "error"
        assert place["file"] == "in.jsonl"
        assert place["line"] == index + 1 and place["byte"] == starts[index]
        assert f"in.jsonl:{index + 1}:" in letter["error"]
    assert "not valid UTF-8" in next(d for d in letters if d["item"] == 377)["error"]

    # the bad lines count as failed items: over --max-failures, or none allowed, exits 1
    for k, (extra, says) in enumerate(((["--max-failures", "1"], "more than max_failures=1"),
                                       ([], "2 items failed"))):
        refused = cli(project, "in.jsonl", f"c{k}.jsonl", "--bad-input", "dead-letter", *extra)
        assert refused.returncode == 1 and says in refused.stderr, refused.stderr


def test_a_bad_csv_row_is_dead_lettered_with_its_line_and_byte(project: Path) -> None:
    text = b"n,label\n0,a\n1,b,extra\n2,\xff\n3,\"quoted\nover two lines\"\n4,d\n"
    (project / "in.csv").write_bytes(text)
    with pytest.raises(InputError, match=r"in\.csv:3: row has 3 fields but the header has 2"):
        list(read_items(project / "in.csv"))
    items = list(read_items(project / "in.csv", bad_input="dead-letter"))
    good = [i for i in items if not isinstance(i, Unreadable)]
    bad = [i for i in items if isinstance(i, Unreadable)]
    assert [row["n"] for row in good] == ["0", "3", "4"]
    assert good[1]["label"] == "quoted\nover two lines"
    assert [(b.line, b.byte) for b in bad] == [(3, text.index(b"1,b")),
                                              (4, text.index(b"2,"))]
    assert "not valid UTF-8" in bad[1].error and bad[1].file.endswith("in.csv")

    run = cli(project, "in.csv", "out.jsonl", "--bad-input", "dead-letter",
              "--max-failures", "2")
    assert run.returncode == 0, run.stderr
    assert outputs(project / "out.jsonl") == Counter([0, 3, 4])
    letters = dead_letters(project / "out.jsonl.dead-letters.jsonl")
    assert sorted((d["input"]["line"], d["input"]["byte"]) for d in letters) == \
        [(b.line, b.byte) for b in bad]


def test_csv_lines_and_offsets_with_crlf_and_bare_cr_line_ends(tmp_path: Path) -> None:
    """Lines are counted as text (universal newlines); a byte offset is found by counting
    ``\n``, so a file of bare-CR line ends gets its line but no offset."""
    for newline in (b"\r\n", b"\r"):
        path = tmp_path / "x.csv"
        rows = [b"a,b", b"1,2", b"3", b"4,5"]
        path.write_bytes(b"\xef\xbb\xbf" + newline.join(rows) + newline)
        items = list(read_items(path, bad_input="dead-letter"))
        assert items[0] == {"a": "1", "b": "2"} and items[2] == {"a": "4", "b": "5"}
        assert isinstance(items[1], Unreadable)
        assert items[1].line == 3
        assert items[1].byte == (3 + 2 * (3 + len(newline)) if newline == b"\r\n" else None)


def test_a_parquet_row_group_that_fails_is_dead_lettered_whole(tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "in.parquet"
    table = pyarrow.table({"n": list(range(300))})
    parquet.write_table(table, path, row_group_size=100, compression="none")
    column = parquet.ParquetFile(path).metadata.row_group(1).column(0)
    at = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(path.read_bytes())
    data[at:at + 32] = b"\xff" * 32  # the page header of row group 1: unreadable
    path.write_bytes(bytes(data))

    with pytest.raises(InputError, match=r"row 101: Parquet data is corrupt in row group 1 "):
        list(read_items(path))
    items = list(read_items(path, bad_input="dead-letter"))
    assert [i["n"] for i in items if not isinstance(i, Unreadable)] == \
        [*range(100), *range(200, 300)]
    bad = [i for i in items if isinstance(i, Unreadable)]
    assert len(bad) == 1 and bad[0].row_group == 1 and bad[0].rows == (101, 200)
    assert items.index(bad[0]) == 100


def test_the_invalid_json_error_says_at_once() -> None:
    with pytest.raises(InputError) as caught:
        list(read_items_of(b'{"a": 1}\n{"a": "x\x01"}\n'))
    message = str(caught.value)
    assert ":2: invalid JSON (Invalid control character at column 9)" in message
    assert "at at" not in message


def read_items_of(data: bytes, **kwargs: str) -> list:
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "in.jsonl"
        path.write_bytes(data)
        return list(read_items(path, **kwargs))


def test_an_over_long_line_is_skipped_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import fitwork.io.inputs

    monkeypatch.setattr(fitwork.io.inputs, "MAX_LINE_BYTES", 16)
    items = read_items_of(b'{"n": 0}\n{"n": "' + b"x" * 50 + b'"}\n{"n": 2}\n',
                          bad_input="dead-letter")
    assert items[0] == {"n": 0} and items[2] == {"n": 2}
    assert isinstance(items[1], Unreadable) and items[1].byte == 9 and items[1].line == 2


def test_a_run_stopped_at_a_bad_line_resumes_once_it_is_repaired(project: Path) -> None:
    count, bad = 700, 600
    source = project / "in.jsonl"
    jsonl_with_bad_lines(source, count, {bad: b'{"n": 600,,}\n'}, pause=0.003)
    stopped = cli(project, "in.jsonl", "out.jsonl")
    assert stopped.returncode == 1 and "in.jsonl:601: invalid JSON" in stopped.stderr
    assert "--resume continues the run" in stopped.stderr
    state = load(project / "out.jsonl.journal")
    assert state.checkpoints >= 1 and state.read is not None, "the run took checkpoints"
    file, at, _ = state.read
    original = source.read_bytes()
    assert file == 0 and 0 < at <= original.index(b'{"n": 600,,}')

    # a change before what the run had finished is refused, naming the file and the offset
    source.write_bytes(original.replace(b'{"n": 10,', b'{"n": 10 ,'))
    refused = cli(project, "in.jsonl", "out.jsonl", "--resume")
    assert refused.returncode == 1, refused.stderr
    assert f"input in.jsonl changed within its first {at:,} bytes" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    # the repair of the bad line (after the last checkpoint) is accepted
    source.write_bytes(original.replace(b'{"n": 600,,}', b'{"n": 600, "pause": 0}'))
    resumed = cli(project, "in.jsonl", "out.jsonl", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(project / "out.jsonl") == Counter(range(count))
    assert not (project / "out.jsonl.journal").exists()


def test_journal_prefix_of_a_glob_and_an_older_journal(tmp_path: Path) -> None:
    for k in range(2):
        (tmp_path / f"p{k}.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(10)))
    pattern = str(tmp_path / "p*.jsonl")
    out, where = tmp_path / "out.jsonl", tmp_path / "j"
    header = identity("p", Path(pattern), out)
    reader = read_items(pattern)
    journal = Journal.start(where, header, reader)
    items = [next(reader) for _ in range(14)]
    assert items[13] == {"n": 3}
    journal.checkpoint([(0, 13)], 10, 13)  # ends after line 3 of p1
    journal.close()
    assert load(where).read[:2] == (1, len(b"".join(f'{{"n": {i}}}\n'.encode()
                                                    for i in range(3))))
    # p0 may not change at all; p1 after its third line may
    (tmp_path / "p1.jsonl").write_text(
        "".join(f'{{"n": {i}}}\n' for i in range(3)) + '{"n": 99}\n')
    Journal.resume(where, header, read_items(pattern)).close()
    (tmp_path / "p0.jsonl").write_text("".join(f'{{"n": {i}}}\n' for i in range(11)))
    with pytest.raises(JournalError, match=r"p1\.jsonl \(or a file before it\) changed "
                                           "within its first 27 bytes"):
        Journal.resume(where, header, read_items(pattern))

    lines = (where / JOURNAL_FILE).read_text().splitlines()
    old = json.loads(lines[0]) | {"journal": 2}
    (where / JOURNAL_FILE).write_text(json.dumps(old) + "\n")
    with pytest.raises(JournalError, match="journal version 2, this one reads version 3"):
        load(where)
    shutil.rmtree(where)


def test_a_csv_input_is_identified_by_the_lines_read(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    rows = ["n,label", *(f"{i},x{i}" for i in range(10))]
    source.write_text("\n".join(rows) + "\n")
    out, where = tmp_path / "out.jsonl", tmp_path / "j"
    header = identity("p", source, out)
    reader = read_items(source)
    journal = Journal.start(where, header, reader)
    assert [next(reader)["n"] for _ in range(5)] == ["0", "1", "2", "3", "4"]
    journal.checkpoint([(0, 5)], 10, 5)  # the rows end with line 6
    journal.close()
    assert load(where).read[:2] == (0, 6)
    source.write_text("\n".join([*rows[:8], "7,repaired", *rows[9:]]) + "\n")
    Journal.resume(where, header, read_items(source)).close()
    source.write_text("\n".join([*rows[:3], "2,changed", *rows[4:]]) + "\n")
    with pytest.raises(JournalError, match=r"in\.csv changed within its first 6 lines"):
        Journal.resume(where, header, read_items(source))


def test_tracking_starts_before_reading() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "in.jsonl"
        path.write_text('{"n": 0}\n{"n": 1}\n{"n": 2}\n')
        tracked = read_items(path)
        tracked.track()
        assert [item["n"] for item in tracked] == [0, 1, 2]
        assert tracked.end_of(1) == (0, 18) and tracked.end_of(2) == (0, 27)
        late = read_items(path)
        next(late)
        with pytest.raises(ValueError, match="before the first item"):
            late.track()


def test_sharded_readers_send_bad_rows_alone_to_the_dead_letters(project: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    from fitwork.engine.parts import read_parts

    shards = project / "shards"
    shards.mkdir()
    starts = jsonl_with_bad_lines(shards / "a.jsonl", 300,
                                  {50: b'{"n": 50,,}\n', 250: b'{"n": 250\n'})
    (shards / "b.csv").write_text(
        "n\n" + "".join(f"{i}\n" if i != 320 else "320,extra\n" for i in range(300, 400)))
    path = shards / "c.parquet"
    parquet.write_table(pyarrow.table({"n": list(range(400, 700))}), path,
                        row_group_size=100, compression="none")
    column = parquet.ParquetFile(path).metadata.row_group(1).column(0)
    at = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(path.read_bytes())
    data[at:at + 32] = b"\xff" * 32
    path.write_bytes(bytes(data))

    run = cli(project, "shards", "out/", "--bad-input", "dead-letter", "--max-failures", "4")
    assert run.returncode == 0, run.stderr
    lost = {50, 250, 320, *range(500, 600)}
    assert Counter(row["n"] for row in read_parts(project / "out")) == \
        Counter(n for n in range(700) if n not in lost)
    letters = dead_letters(project / "out" / "_dead-letters.jsonl")
    places = sorted((Path(d["input"]["file"]).name, d["input"].get("byte"),
                     d["input"].get("line"), d["input"].get("row_group")) for d in letters)
    assert places == [("a.jsonl", starts[50], None, None), ("a.jsonl", starts[250], None, None),
                      ("b.csv", 2 + 20 * 4, 22, None),
                      ("c.parquet", None, None, 1)]
    assert all(d["unit"] == "read" and d["error"].startswith("InputError: ") for d in letters)


@unit
def value_of(row: dict) -> int:
    return int(row["n"])


@pytest.mark.parametrize("engine", ["local", "sim"])
def test_the_python_api_dead_letters_what_read_items_could_not_read(
        tmp_path: Path, engine: str) -> None:
    jsonl_with_bad_lines(tmp_path / "in.jsonl", 200, {3: b"{\n", 150: b"[1, 2\n"})
    items = fitwork.io.inputs.read_items(tmp_path / "in.jsonl", bad_input="dead-letter")
    dead = tmp_path / "dead.jsonl"
    with fitwork.run(Pipeline(value_of), items, engine=engine, ordered=True,
                     dead_letter=dead, max_failures=2) as result:
        assert list(result) == [n for n in range(200) if n not in (3, 150)]
    assert result.record.failures == 2
    assert [(d["item"], d["input"]["line"]) for d in dead_letters(dead)] == [(3, 4), (150, 151)]
    with pytest.raises(InputError, match="bad_input='skip': must be one of error, dead-letter"):
        fitwork.io.inputs.read_items(tmp_path / "in.jsonl", bad_input="skip")
