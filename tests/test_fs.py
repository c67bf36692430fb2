"""Inputs by glob and by URL: `fitwork.io.fs` and `read_items` over fsspec's memory store."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fitwork.errors import InputError
from fitwork.io.fs import FSSPEC_EXTRA, expand, is_glob, is_url, open_input
from fitwork.io.inputs import count_items, read_items

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def store() -> Iterator[str]:
    """A fresh folder in fsspec's in-process memory store, as a ``memory://`` URL."""
    memory = fsspec.filesystem("memory")
    root = f"/fitwork-test-{uuid.uuid4().hex}"
    yield f"memory://{root}"
    if memory.exists(root):
        memory.rm(root, recursive=True)


def put(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as handle:
        handle.write(data)


def parquet_bytes(rows: list[dict]) -> bytes:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def jsonl(*values: object) -> bytes:
    return "".join(json.dumps(v) + "\n" for v in values).encode()


# -- is_url, is_glob --------------------------------------------------------------------------

def test_urls_are_told_from_paths() -> None:
    assert is_url("s3://bucket/x.parquet") and is_url("memory://x") and is_url("gs://b/k")
    assert is_url("file:///tmp/x.jsonl") and is_url("s3+ssl://b/k")
    assert not is_url("data/x.jsonl") and not is_url("/abs/x.csv") and not is_url("x.csv")
    assert not is_url("C:\\data\\x.csv") and not is_url("c://x")
    assert not is_url(Path("s3://bucket/x"))  # a Path folds "//": pass URLs as strings
    assert is_glob("data/*.jsonl") and is_glob("x?.csv") and is_glob("x[12].csv")
    assert not is_glob("data/x.jsonl")


# -- expand: local ----------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("b.jsonl", "a.jsonl", ".hidden.jsonl", "c.csv", "sub/d.jsonl",
                 "sub/deeper/e.parquet", "x[1].jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    (tmp_path / "folder.jsonl").mkdir()
    return tmp_path


def test_a_local_glob_is_expanded_and_sorted(tree: Path) -> None:
    assert expand(f"{tree}/*.jsonl") == [f"{tree}/a.jsonl", f"{tree}/b.jsonl",
                                         f"{tree}/folder.jsonl", f"{tree}/x[1].jsonl"]
    assert expand(f"{tree}/*.jsonl", files_only=True) == [
        f"{tree}/a.jsonl", f"{tree}/b.jsonl", f"{tree}/x[1].jsonl"]
    assert expand(f"{tree}/**/*.jsonl", files_only=True) == [
        f"{tree}/a.jsonl", f"{tree}/b.jsonl", f"{tree}/sub/d.jsonl", f"{tree}/x[1].jsonl"]
    assert expand(f"{tree}/**/*.parquet") == [f"{tree}/sub/deeper/e.parquet"]
    assert expand(f"{tree}/.*.jsonl") == [f"{tree}/.hidden.jsonl"]
    assert expand(f"{tree}/*.nothing") == []


def test_a_plain_path_is_returned_as_it_is(tree: Path) -> None:
    assert expand(f"{tree}/a.jsonl") == [f"{tree}/a.jsonl"]
    assert expand(f"{tree}/x[1].jsonl") == [f"{tree}/x[1].jsonl"]  # it exists: no pattern
    assert expand(str(tree)) == [str(tree)]  # a directory is not listed here
    assert expand(str(tree), files_only=True) == []
    assert expand(f"{tree}/missing.jsonl") == []


# -- expand and open_input: URLs ----------------------------------------------------------------

def test_a_url_glob_is_expanded_through_fsspec(store: str) -> None:
    for name in ("b.jsonl", "a.jsonl", "c.csv", "sub/d.jsonl"):
        put(f"{store}/{name}", b"1\n")
    root = store.removeprefix("memory://")

    assert expand(f"{store}/*.jsonl") == [f"memory://{root}/a.jsonl", f"memory://{root}/b.jsonl"]
    assert expand(f"{store}/**/*.jsonl") == [f"memory://{root}/a.jsonl",
                                             f"memory://{root}/b.jsonl",
                                             f"memory://{root}/sub/d.jsonl"]
    assert expand(f"{store}/*", files_only=True) == [
        f"memory://{root}/a.jsonl", f"memory://{root}/b.jsonl", f"memory://{root}/c.csv"]
    assert expand(f"{store}/c.csv") == [f"{store}/c.csv"]
    assert expand(f"{store}/missing.csv") == [] and expand(f"{store}/*.parquet") == []


def test_open_input_reads_a_url_and_a_local_file(store: str, tmp_path: Path) -> None:
    put(f"{store}/a.bin", b"remote")
    (tmp_path / "a.bin").write_bytes(b"local")

    with open_input(f"{store}/a.bin") as handle:
        assert handle.read() == b"remote"
    with open_input(str(tmp_path / "a.bin")) as handle:
        assert handle.read() == b"local"


def test_open_input_failures_name_the_place_and_the_fix(store: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        open_input(f"{store}/missing.jsonl")
    assert str(caught.value) == f"input {store}/missing.jsonl: no such file; check the URL"
    with pytest.raises(InputError) as caught:
        open_input(str(tmp_path / "missing.jsonl"), place="sample")
    assert str(caught.value) == "sample: no such file; check the path"
    with pytest.raises(InputError) as caught:
        open_input(str(tmp_path))
    assert str(caught.value) == f"input {tmp_path}: is a directory, expected a file; check the path"
    with pytest.raises(InputError) as caught:
        open_input("nosuch://bucket/x.jsonl")
    assert str(caught.value) == ("input nosuch://bucket/x.jsonl: cannot read nosuch:// URLs "
                                 "(Protocol not known: nosuch); check the URL's protocol")


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_a_store_whose_package_is_missing_is_named() -> None:
    with pytest.raises(InputError) as caught:
        open_input("s3://bucket/x.jsonl")
    message = str(caught.value)
    assert message.startswith("input s3://bucket/x.jsonl: s3:// needs a package that is missing")
    assert "s3fs" in message and "\n" not in message


def test_without_fsspec_a_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # what `import fsspec` finds: nothing
    monkeypatch.setitem(sys.modules, "fsspec.core", None)

    for attempt in (lambda: open_input("s3://bucket/x.jsonl"),
                    lambda: expand("s3://bucket/*.jsonl"),
                    lambda: read_items("s3://bucket/x.jsonl")):
        with pytest.raises(InputError) as caught:
            attempt()
        assert str(caught.value).endswith(
            "reading a URL needs fsspec, which is missing; install the fsspec extra: "
            "pip install 'fitwork[fsspec]'")
        assert FSSPEC_EXTRA in str(caught.value)


# -- read_items over globs and URLs ---------------------------------------------------------------

def test_read_items_reads_every_file_a_local_glob_matches(tmp_path: Path) -> None:
    (tmp_path / "part-2.jsonl").write_bytes(jsonl(3, 4))
    (tmp_path / "part-1.csv").write_text("n,s\n1,a\n2,b\n")
    (tmp_path / "part-3.parquet").write_bytes(parquet_bytes([{"n": 5}, {"n": 6}]))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "part-4.jsonl").write_bytes(jsonl(7))
    (tmp_path / "part-5").mkdir()  # a directory the pattern matches is not read

    assert list(read_items(str(tmp_path / "part-*"))) == [
        {"n": "1", "s": "a"}, {"n": "2", "s": "b"}, 3, 4, {"n": 5}, {"n": 6}]
    assert list(read_items(tmp_path / "part-*", csv_types=True))[:2] == [
        {"n": 1, "s": "a"}, {"n": 2, "s": "b"}]
    assert list(read_items(f"{tmp_path}/**/*.jsonl")) == [3, 4, 7]
    assert count_items(f"{tmp_path}/**/*.jsonl") == 3
    assert count_items(str(tmp_path / "part-*")) == 6


def test_a_glob_that_matches_nothing_names_the_pattern(tmp_path: Path) -> None:
    (tmp_path / "folder.jsonl").mkdir()
    pattern = f"{tmp_path}/*.jsonl"

    with pytest.raises(InputError) as caught:
        read_items(pattern)
    assert str(caught.value) == (
        f"input {pattern}: no file matches the pattern; check the --input pattern")
    assert count_items(pattern) is None


def test_bad_content_in_a_matched_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(jsonl(1))
    (tmp_path / "b.jsonl").write_bytes(b"2\n{oops\n")

    items = read_items(f"{tmp_path}/*.jsonl")
    assert [next(items), next(items)] == [1, 2]
    with pytest.raises(InputError, match=rf"^input {tmp_path}/b\.jsonl:2: invalid JSON"):
        next(items)


def test_read_items_reads_urls_by_their_suffix(store: str) -> None:
    put(f"{store}/in/a.jsonl", jsonl({"n": 1}, {"n": 2}))
    put(f"{store}/in/b.csv", b"n,code\n3,007\n")
    put(f"{store}/in/c.parquet", parquet_bytes([{"n": 4}]))

    assert list(read_items(f"{store}/in/a.jsonl")) == [{"n": 1}, {"n": 2}]
    assert list(read_items(f"{store}/in/b.csv", csv_types=True)) == [{"n": 3, "code": "007"}]
    assert list(read_items(f"{store}/in/c.parquet")) == [{"n": 4}]
    assert list(read_items(f"{store}/in/*", csv_types=True)) == [
        {"n": 1}, {"n": 2}, {"n": 3, "code": "007"}, {"n": 4}]
    assert count_items(f"{store}/in/*") is None  # counting would read the store twice


def test_url_failures_are_one_line_input_errors(store: str) -> None:
    put(f"{store}/bad.jsonl", b"1\n{oops\n")
    root = store.removeprefix("memory://")

    with pytest.raises(InputError) as caught:
        read_items(f"{store}/missing.jsonl")
    assert str(caught.value) == f"input {store}/missing.jsonl: no such file; check the --input URL"
    with pytest.raises(InputError) as caught:
        read_items(f"{store}/*.csv")
    assert str(caught.value) == (
        f"input {store}/*.csv: no file matches the pattern; check the --input pattern")
    items = read_items(f"{store}/*.jsonl")
    assert next(items) == 1
    with pytest.raises(InputError, match=rf"^input memory://{root}/bad\.jsonl:2: invalid JSON"):
        next(items)
