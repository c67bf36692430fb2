"""Tests for `fitwork.io.inputs`: each input format, each output format, and the errors' wording."""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fitwork.io.inputs as fio
from fitwork.errors import InputError
from fitwork.io.inputs import count_items, read_items
from fitwork.io.writers import OutputWriter, open_writer


def _lines(path: Path) -> list[Any]:
    """The JSON value of each line of a JSON Lines file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --------------------------------------------------------------------------- JSON Lines in


def test_jsonl_round_trip_keeps_values_and_order(tmp_path: Path) -> None:
    items = [{"id": 1, "text": "héllo"}, [1, 2.5, None], "plain", 7, True, None]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")

    assert list(read_items(path)) == items
    assert list(read_items(str(path))) == items


def test_ndjson_and_unknown_suffixes_read_as_json_lines(tmp_path: Path) -> None:
    for name in ("in.ndjson", "in.txt", "no_suffix"):
        path = tmp_path / name
        path.write_text('{"a": 1}\n{"a": 2}\n', encoding="utf-8")
        assert list(read_items(path)) == [{"a": 1}, {"a": 2}], name


def test_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('\n{"a": 1}\n\n   \n\t\r\n{"a": 2}\n\n', encoding="utf-8")

    assert list(read_items(path)) == [{"a": 1}, {"a": 2}]
    assert count_items(path) == 2


def test_jsonl_without_final_newline_and_with_crlf(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\r\n{"a": 2}')

    assert list(read_items(path)) == [{"a": 1}, {"a": 2}]


def test_malformed_json_line_names_file_and_line_after_earlier_items(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n{oops\n{"a": 3}\n', encoding="utf-8")

    items = read_items(path)
    assert next(items) == {"a": 1}
    with pytest.raises(InputError) as caught:
        next(items)

    message = str(caught.value)
    assert message.startswith(f"input {path}:3: invalid JSON (")
    assert "at column 2" in message
    assert message.endswith("fix or remove that line")
    assert "\n" not in message


def test_malformed_json_line_message_matches_documented_shape(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n?\n', encoding="utf-8")

    seen: list[Any] = []
    with pytest.raises(InputError) as caught:
        for item in read_items(path):
            seen.append(item)

    assert seen == [{"a": 1}, {"a": 2}]
    assert str(caught.value) == (
        f"input {path}:3: invalid JSON (Expecting value at column 1); fix or remove that line"
    )


def test_invalid_utf8_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n"\xff"\n')

    with pytest.raises(InputError, match=r"in\.jsonl:2: not valid UTF-8"):
        list(read_items(path))


def test_utf8_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n')

    assert list(read_items(path)) == [{"a": 1}]
    assert count_items(path) == 1


# --------------------------------------------------------------------------- path errors


def test_missing_input_raises_at_call_with_place_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "data" / "x.jsonl"

    with pytest.raises(InputError) as caught:
        read_items(path)  # no iteration needed: the path is checked up front

    assert str(caught.value) == (
        f"input {path}: no such file or directory; check the --input path"
    )
    assert isinstance(caught.value, ValueError)


def test_unreadable_input_says_permission_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n', encoding="utf-8")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(path))

    # Patch the module's `open` (running as root, chmod 000 would not stop a read).
    monkeypatch.setattr(fio, "open", refuse, raising=False)

    with pytest.raises(InputError) as caught:
        list(read_items(path))
    assert str(caught.value).startswith(f"input {path}: permission denied; ")
    assert "chmod" in str(caught.value)


# --------------------------------------------------------------------------- CSV in


def test_csv_rows_are_dicts_of_strings(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,name,score\n1,ann,2.5\n2,"bob, jr",\n\n3,"multi\nline",7\n',
                    encoding="utf-8")

    assert list(read_items(path)) == [
        {"id": "1", "name": "ann", "score": "2.5"},
        {"id": "2", "name": "bob, jr", "score": ""},
        {"id": "3", "name": "multi\nline", "score": "7"},
    ]
    assert count_items(path) == 3


def test_csv_suffix_is_case_insensitive(tmp_path: Path) -> None:
    path = tmp_path / "IN.CSV"
    path.write_text("a\nx\n", encoding="utf-8")

    assert list(read_items(path)) == [{"a": "x"}]


def test_empty_csv_has_no_header(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("", encoding="utf-8")

    with pytest.raises(InputError) as caught:
        list(read_items(path))
    assert str(caught.value) == (
        f"input {path}: empty CSV, no header row; put the column names on the first line"
    )
    assert count_items(path) == 0


def test_csv_duplicate_header_column_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("a,b,a\n1,2,3\n", encoding="utf-8")

    with pytest.raises(InputError, match=r"in\.csv:1: column 'a' appears twice"):
        list(read_items(path))


def test_csv_row_of_wrong_width_names_its_line_after_earlier_rows(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("a,b\n1,2\n3,4,5\n", encoding="utf-8")

    items = read_items(path)
    assert next(items) == {"a": "1", "b": "2"}
    with pytest.raises(InputError) as caught:
        next(items)
    assert str(caught.value).startswith(
        f"input {path}:3: row has 3 fields but the header has 2; "
    )


# --------------------------------------------------------------------------- directory in


def test_directory_yields_sorted_visible_regular_files(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("b.png", "a.png", "c.txt", ".hidden"):
        (folder / name).write_bytes(b"x")
    (folder / "nested").mkdir()
    (folder / "nested" / "deep.png").write_bytes(b"x")

    items = list(read_items(folder))

    assert items == [str(folder / "a.png"), str(folder / "b.png"), str(folder / "c.txt")]
    assert all(isinstance(item, str) for item in items)
    assert count_items(folder) == 3


def test_empty_directory_yields_nothing(tmp_path: Path) -> None:
    assert list(read_items(tmp_path)) == []
    assert count_items(tmp_path) == 0


# --------------------------------------------------------------------------- Parquet in


def test_parquet_round_trip_in_record_batches(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(3_000)]
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=700)

    items = read_items(path)
    assert next(items) == rows[0]
    assert [rows[0], *items] == rows
    assert count_items(path) == 3_000


def test_file_that_is_not_parquet_is_an_input_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "in.parquet"
    path.write_text("not parquet at all", encoding="utf-8")

    with pytest.raises(InputError, match=r"^input .*in\.parquet: not a readable Parquet file"):
        list(read_items(path))
    assert count_items(path) is None


def test_missing_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)

    with pytest.raises(InputError) as caught:
        read_items(path)
    assert str(caught.value).endswith("install the parquet extra: pip install 'fitwork[parquet]'")
    with pytest.raises(InputError, match=r"fitwork\[parquet\]"):
        open_writer(tmp_path / "out.parquet")
    assert count_items(path) is None


# --------------------------------------------------------------------------- count_items


def test_count_items_is_none_when_unknown(tmp_path: Path) -> None:
    assert count_items(tmp_path / "missing.jsonl") is None


def test_count_items_for_jsonl_counts_non_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("1\n2\n\n3\n", encoding="utf-8")

    assert count_items(path) == 3
    assert count_items(path) == len(list(read_items(path)))


# --------------------------------------------------------------------------- JSON Lines out


@dataclass
class _Point:
    x: int
    y: float


def test_jsonl_writer_encodes_numpy_bytes_paths_sets_and_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "out" / "deeper" / "results.jsonl"  # parents do not exist yet
    item = {
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "int": np.int64(7),
        "float": np.float32(0.5),
        "bool": np.bool_(True),
        "bytes": b"\x00\xffdata",
        "path": Path("/tmp/a.png"),
        "set": {3, 1, 2},
        "tuple": (1, "two"),
        "point": _Point(1, 2.5),
        "text": "naïve",
    }

    with open_writer(path) as writer:
        assert isinstance(writer, OutputWriter)
        writer.write(item)
        writer.write(np.float64(1.25))
        writer.write([np.arange(2)])

    assert writer.count == 3
    first, second, third = _lines(path)
    assert first == {
        "array": [[0, 1, 2], [3, 4, 5]],
        "int": 7,
        "float": 0.5,
        "bool": True,
        "bytes": base64.b64encode(b"\x00\xffdata").decode("ascii"),
        "path": "/tmp/a.png",
        "set": [1, 2, 3],
        "tuple": [1, "two"],
        "point": {"x": 1, "y": 2.5},
        "text": "naïve",
    }
    assert isinstance(first["int"], int)
    assert second == 1.25
    assert third == [[0, 1]]
    assert "naïve" in path.read_text(encoding="utf-8")


def test_jsonl_writer_flushes_every_hundred_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    writer = open_writer(path)
    try:
        for i in range(250):
            writer.write({"i": i})
        # Without close, at least the first 200 lines are already on disk.
        on_disk = _lines(path)
        assert len(on_disk) >= 200
        assert on_disk[:200] == [{"i": i} for i in range(200)]
    finally:
        writer.close()
    assert len(_lines(path)) == 250
    writer.close()  # a second close is harmless


def test_writer_closes_and_keeps_output_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError, match="crash"), open_writer(path) as writer:
        writer.write({"i": 1})
        raise RuntimeError("crash")

    assert _lines(path) == [{"i": 1}]
    with pytest.raises(ValueError, match="write after close"):
        writer.write({"i": 2})


class _Opaque:
    pass


def test_unencodable_value_names_output_file_and_type(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with open_writer(path) as writer:
        writer.write({"ok": 1})
        with pytest.raises(InputError) as caught:
            writer.write({"bad": _Opaque()})
        writer.write({"ok": 2})  # a refused item leaves no partial line behind

    message = str(caught.value)
    assert message.startswith(f"output {path}: item 2: ")
    assert "_Opaque" in message
    assert "JSON-serialisable" in message
    assert "Parquet" in message
    assert "\n" not in message
    assert _lines(path) == [{"ok": 1}, {"ok": 2}]
    assert writer.count == 2


def test_unencodable_dict_key_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with open_writer(path) as writer, pytest.raises(InputError, match=r"out\.jsonl: item 1"):
        writer.write({(1, 2): "tuple key"})


# --------------------------------------------------------------------------- Parquet out


def test_parquet_writer_round_trip_across_several_batches(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"id": i, "name": f"row-{i}", "score": i * 0.5} for i in range(25_001)]
    path = tmp_path / "out" / "results.parquet"

    with open_writer(path) as writer:
        for row in rows:
            writer.write(row)

    assert writer.count == 25_001
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_rows == 25_001
    assert metadata.num_row_groups == 3  # 10,000 + 10,000 + 5,001
    assert list(read_items(path)) == rows
    assert count_items(path) == 25_001


def test_parquet_writer_wraps_non_dict_items(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "out.parquet"

    with open_writer(path) as writer:
        for value in (1, 2, 3):
            writer.write(value)

    assert list(read_items(path)) == [{"value": 1}, {"value": 2}, {"value": 3}]


def test_parquet_writer_with_no_rows_leaves_a_valid_empty_file(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "out.parquet"

    with open_writer(path) as writer:
        pass

    assert writer.count == 0
    assert count_items(path) == 0
    assert list(read_items(path)) == []


def test_parquet_writer_refuses_a_field_missing_from_the_first_batch(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "out.parquet"

    with pytest.raises(InputError) as caught, open_writer(path) as writer:
        for i in range(10_001):
            writer.write({"a": i} if i < 10_000 else {"a": i, "extra": 1})

    assert str(caught.value).startswith(f"output {path}: rows 10001-10001: field 'extra'")
    assert pq.ParquetFile(path).metadata.num_rows == 10_000  # the first batch survived


def test_the_output_digest_ignores_order_and_sees_any_difference() -> None:
    from fitwork.io.writers import OutputDigest

    def digest(values: list) -> str:
        made = OutputDigest()
        for value in values:
            made.add(value)
        return made.hexdigest()

    rows = [{"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, 3, "x"]
    assert digest(rows) == digest(list(reversed(rows)))
    assert digest(rows) != digest([*rows[:3], "y"])
    assert digest(rows) != digest(rows[:3]) and digest(rows).startswith("4:")
