"""The CLI as a new user meets it, run for real (the installed `fitwork` script) in a folder
holding the user's pipe.py: a module found from the current directory, per-unit flags, what
happens to an existing output, paths that are inputs, a start that failed, piped tables,
`--decompose` measured on the input, and a plan that changes a declared batch size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fitwork import RunRecord

FITWORK = str(Path(sys.executable).parent / "fitwork")  # a console script: cwd not on its path

PIPE = textwrap.dedent("""
    import time

    from fitwork import Pipeline, unit

    @unit(cpu=0.5)
    def parse(row):
        return int(row["n"])

    @unit(batch_size=4)
    def square(batch):
        return [{"n": n, "square": n * n} for n in batch]

    @unit(io=2)
    def tag(row):
        return {**row, "tag": "t"}

    pipeline = Pipeline(parse, square, tag, name="pipe")

    @unit(batch_size=64)
    def square64(batch):
        return [{"n": n, "square": n * n} for n in batch]

    wide = Pipeline(parse, unit(square64.fn, name="square", batch_size=64), tag, name="pipe")

    @unit(cpu=0.5)
    def reads_a_column_with_a_very_long_name_so_that_the_table_is_wider_than_eighty(row):
        return row

    long_names = Pipeline(
        reads_a_column_with_a_very_long_name_so_that_the_table_is_wider_than_eighty,
        name="long")

    class Broken:
        def __init__(self):
            raise RuntimeError("weights not found")

        def __call__(self, row):
            return row

    broken = Pipeline(unit(Broken), name="pipe")

    @unit(cpu=64)
    def greedy(row):
        return row

    greedy_pipeline = Pipeline(greedy, name="greedy")

    @unit
    def picky(row):
        if row["n"] % 10 == 3:
            raise ValueError("no")
        return row

    picky_pipeline = Pipeline(picky, name="picky")

    def monolith(row):
        n = int(row["n"])
        time.sleep(0.002)
        a = sum(i * n for i in range(3000))
        b = sum(i * a for i in range(3000)) % 97
        c = sum(i ^ b for i in range(3000))
        d = (a + b + c) % 1000
        return {"n": n, "d": d}
""")
COUNT = 40


def fitwork(*args: str, cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PYTHONPATH")}
    return subprocess.run([FITWORK, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**environment, **(env or {})})


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


def _write_project(root: Path) -> Path:
    (root / "pipe.py").write_text(PIPE)
    (root / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(COUNT)))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _write_project(tmp_path)


@pytest.fixture(scope="module")
def pipe_profile(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """`fitwork profile pipe:pipeline` of a project as `project` writes it, made once by the
    CLI for the tests that plan from it: each writes these bytes into its own folder."""
    root = _write_project(tmp_path_factory.mktemp("profiled"))
    done = fitwork("profile", "pipe:pipeline", "--input", "in.jsonl", "--samples", "8",
                   "-o", "prof.json", cwd=root)
    assert done.returncode == 0, done.stderr
    return (root / "prof.json").read_bytes()


def test_a_module_reference_resolves_from_the_current_directory(project: Path) -> None:
    done = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   cwd=project)
    assert done.returncode == 0, done.stderr
    assert sorted(r["n"] for r in rows(project / "o.jsonl")) == list(range(COUNT))
    missing = fitwork("run", "nope:pipeline", "--input", "in.jsonl", "--output", "p.jsonl",
                      cwd=project)
    assert missing.returncode == 1 and len(errors(missing)) == 1
    assert f"cannot import module 'nope' from {project}" in missing.stderr


def test_per_unit_flags_set_cores_batch_and_io(project: Path) -> None:
    done = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   "--cpus", "parse=0.25", "--batch", "square=8", "--io", "tag=5",
                   "--record", "r.json", cwd=project)
    assert done.returncode == 0, done.stderr
    units = {u.name: u for u in RunRecord.load(project / "r.json").units}
    assert units["parse"].resources["cpu"] == 0.25
    assert units["square"].batch_size == 8
    assert units["tag"].resources["io"] == 5
    assert sorted(r["square"] for r in rows(project / "o.jsonl")) == \
        [n * n for n in range(COUNT)]
    for flags, says in ((["--batch", "parse=2"], "unit 'parse' is not batched"),
                        (["--cpus", "nope=1"], "has no unit 'nope'"),
                        (["--io", "tag=-1"], "--io"),
                        (["--cpus", "parse=0"], "--cpus")):
        refused = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output",
                          "x.jsonl", *flags, cwd=project)
        assert refused.returncode == 2 and says in refused.stderr, (flags, refused.stderr)


def test_per_unit_flags_win_over_a_plan_for_their_unit(project: Path, pipe_profile: bytes
                                                      ) -> None:
    (project / "prof.json").write_bytes(pipe_profile)
    planned = fitwork("plan", "pipe:pipeline", "--profile", "prof.json", "--no-fuse",
                      "--time-limit", "5", "-o", "plan.json", cwd=project)
    assert planned.returncode == 0, planned.stderr
    done = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   "--plan", "plan.json", "--cpus", "square=0.3", "--batch", "square=2",
                   "--record", "r.json", cwd=project)
    assert done.returncode == 0, done.stderr
    units = {u.name: u for u in RunRecord.load(project / "r.json").units}
    assert units["square"].resources["cpu"] == 0.3 and units["square"].batch_size == 2
    adapt = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "a.jsonl",
                    "--plan", "plan.json", "--adapt", "--cpus", "square=0.3", cwd=project)
    assert adapt.returncode == 2 and "drop --adapt or the per-unit flags" in adapt.stderr


def test_an_existing_output_is_refused_overwritten_or_appended_as_asked(project: Path) -> None:
    run = ("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q")
    assert fitwork(*run, cwd=project).returncode == 0
    first = (project / "o.jsonl").read_text()
    refused = fitwork(*run, cwd=project)
    assert refused.returncode == 1 and len(errors(refused)) == 1
    assert "o.jsonl already holds outputs; pass --mode overwrite" in refused.stderr
    assert (project / "o.jsonl").read_text() == first  # untouched
    appended = fitwork(*run, "--mode", "append", cwd=project)
    assert appended.returncode == 0, appended.stderr
    assert sorted(r["n"] for r in rows(project / "o.jsonl")) == sorted(2 * list(range(COUNT)))
    assert (project / "o.jsonl").read_text().startswith(first)
    replaced = fitwork(*run, "--mode", "overwrite", cwd=project)
    assert replaced.returncode == 0, replaced.stderr
    assert sorted(r["n"] for r in rows(project / "o.jsonl")) == list(range(COUNT))
    # an empty output is no output: a new run goes
    (project / "e.jsonl").write_text("")
    assert fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "e.jsonl", "-q",
                   cwd=project).returncode == 0
    # --resume goes with the journal, not a mode; Parquet and directories do not append
    both = fitwork(*run, "--resume", "--mode", "overwrite", cwd=project)
    assert both.returncode == 2 and "drop --mode overwrite" in both.stderr
    parquet = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.parquet",
                      "--mode", "append", cwd=project)
    assert parquet.returncode == 2 and "--mode append adds lines" in parquet.stderr


def test_append_keeps_the_dead_letters_of_earlier_runs(project: Path) -> None:
    run = ("run", "pipe:picky_pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
           "--max-failures", "10")
    assert fitwork(*run, cwd=project).returncode == 0
    letters = project / "o.jsonl.dead-letters.jsonl"
    assert len(rows(letters)) == 4
    assert fitwork(*run, "--mode", "append", cwd=project).returncode == 0
    kept = rows(letters)
    assert len(kept) == 8 and len({d["run_id"] for d in kept}) == 2
    assert fitwork(*run, "--mode", "overwrite", cwd=project).returncode == 0
    assert len(rows(letters)) == 4


def test_a_path_the_run_writes_that_it_also_reads_is_refused(project: Path,
                                                             pipe_profile: bytes) -> None:
    (project / "prof.json").write_bytes(pipe_profile)
    assert fitwork("plan", "pipe:pipeline", "--profile", "prof.json", "--time-limit", "5",
                   "-o", "plan.json", cwd=project).returncode == 0
    plan, source = (project / "plan.json").read_bytes(), (project / "in.jsonl").read_bytes()
    for flags, says in (
            (["--output", "o.jsonl", "--plan", "plan.json", "--record", "plan.json"],
             "--record plan.json is the --plan this command reads"),
            (["--output", "in.jsonl"], "--output in.jsonl is the --input this command reads"),
            (["--output", "o.jsonl", "--plan", "plan.json", "--dead-letter", "plan.json"],
             "--dead-letter plan.json is the --plan"),
            (["--output", "pipe.py"], "--output pipe.py is the pipeline file")):
        reference = "pipe.py:pipeline" if "pipe.py" in flags else "pipe:pipeline"
        done = fitwork("run", reference, "--input", "in.jsonl", *flags, cwd=project)
        assert done.returncode == 2 and len(errors(done)) == 1, done.stderr
        assert says in done.stderr, done.stderr
    assert (project / "plan.json").read_bytes() == plan
    assert (project / "in.jsonl").read_bytes() == source
    for command, says in ((["profile", "pipe:pipeline", "--input", "in.jsonl", "-o",
                            "in.jsonl"], "--output in.jsonl is the --input"),
                          (["plan", "pipe:pipeline", "--profile", "prof.json", "-o",
                            "prof.json"], "--output prof.json is the --profile")):
        done = fitwork(*command, cwd=project)
        assert done.returncode == 2 and says in done.stderr, done.stderr
    assert (project / "in.jsonl").read_bytes() == source


def test_a_start_that_did_no_item_leaves_nothing_that_blocks_the_next(project: Path) -> None:
    failed = fitwork("run", "pipe:broken", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                     cwd=project)
    assert failed.returncode == 1 and len(errors(failed)) == 1, failed.stderr
    assert "no item was done, so its journal o.jsonl.journal and the empty o.jsonl were " \
           "removed" in failed.stderr
    assert not (project / "o.jsonl.journal").exists() and not (project / "o.jsonl").exists()
    again = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                    cwd=project)
    assert again.returncode == 0, again.stderr
    # a journal of a run killed before its first item (only the header) is taken over
    from fitwork.io.journal import Journal, identity

    Journal.start(project / "k.jsonl.journal",
                  identity("pipe", project / "in.jsonl", project / "k.jsonl")).close()
    taken = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "k.jsonl", "-q",
                    cwd=project)
    assert taken.returncode == 0, taken.stderr
    assert "removed journal k.jsonl.journal: the run that left it did no item" in taken.stderr
    assert sorted(r["n"] for r in rows(project / "k.jsonl")) == list(range(COUNT))


def test_tables_keep_their_width_when_piped(project: Path) -> None:
    done = fitwork("run", "pipe:long_names", "--input", "in.jsonl", "--output", "o.jsonl",
                   "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    name = "reads_a_column_with_a_very_long_name_so_that_the_table_is_wider_than_eighty"
    row = next(line for line in done.stdout.splitlines() if name in line)
    assert len(row) > 80 and "40" in row  # the whole row: name, replicas, items
    assert any(line.startswith("throughput") and "outputs)" in line
               for line in done.stdout.splitlines())  # the headline on one line


def test_run_decompose_measures_the_input_and_a_sleep_is_waiting(project: Path) -> None:
    alone = fitwork("decompose", "pipe:monolith", cwd=project)
    assert alone.returncode == 0, alone.stderr
    pieces = int(alone.stdout.split("): ")[1].split(" unit")[0])
    assert "sleep@" in alone.stdout and "io (source)" in alone.stdout
    done = fitwork("run", "pipe:monolith", "--decompose", "--input", "in.jsonl", "--output",
                   "o.jsonl", "-q", "--record", "r.json", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "decomposed monolith on 16 items of in.jsonl" in done.stderr
    units = RunRecord.load(project / "r.json").units
    assert len(units) < pieces  # measured neighbours of one kind were joined
    expected = {}
    for n in range(COUNT):
        a = sum(i * n for i in range(3000))
        b = sum(i * a for i in range(3000)) % 97
        c = sum(i ^ b for i in range(3000))
        expected[n] = (a + b + c) % 1000
    assert {r["n"]: r["d"] for r in rows(project / "o.jsonl")} == expected


def test_a_plan_that_changes_a_declared_batch_size_says_so_and_why(project: Path) -> None:
    assert fitwork("profile", "pipe:wide", "--input", "in.jsonl", "--samples", "8",
                   "-o", "prof.json", cwd=project).returncode == 0
    planned = fitwork("plan", "pipe:wide", "--profile", "prof.json", "--no-fuse",
                      "--time-limit", "5", "-o", "plan.json", cwd=project)
    assert planned.returncode == 0, planned.stderr
    line = next(line for line in planned.stdout.splitlines()
                if line.startswith("plan: unit 'square' runs batch_size="))
    assert "not the declared 64" in line and "profile with --samples 64 or more" in line
    assert "--batch square=64 keeps the declared size" in line
    ran = fitwork("run", "pipe:wide", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                  "--plan", "plan.json", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert "plan: unit 'square' runs batch_size=" in ran.stderr
    kept = fitwork("run", "pipe:wide", "--input", "in.jsonl", "--output", "k.jsonl", "-q",
                   "--plan", "plan.json", "--batch", "square=64", cwd=project)
    assert kept.returncode == 0 and "runs batch_size=" not in kept.stderr, kept.stderr


def test_a_directory_output_with_parts_is_refused_unless_overwritten(project: Path) -> None:
    shards = project / "in"
    shards.mkdir()
    for k in range(4):
        (shards / f"{k}.jsonl").write_text("".join(json.dumps({"n": n}) + "\n"
                                                   for n in range(k, COUNT, 4)))
    run = ("run", "pipe:pipeline", "--input", "in/", "--output", "out/", "-q")
    assert fitwork(*run, cwd=project).returncode == 0
    refused = fitwork(*run, cwd=project)
    assert refused.returncode == 1 and "out already holds outputs" in refused.stderr
    appended = fitwork(*run, "--mode", "append", cwd=project)
    assert appended.returncode == 2 and "is a directory" in appended.stderr
    again = fitwork(*run, "--mode", "overwrite", cwd=project)
    assert again.returncode == 0, again.stderr
    from fitwork.engine.parts import read_parts

    assert sorted(r["n"] for r in read_parts(project / "out")) == list(range(COUNT))


SLOW = textwrap.dedent("""
    import time

    from fitwork import Pipeline, unit

    @unit(cpu=0.5)
    def slow(row):
        if row["n"] % 50 == 0:
            time.sleep(0.02)  # the run takes a few seconds, so the kill lands inside it
        return {"n": row["n"], "run": 2}

    pipeline = Pipeline(slow, name="slow")
""")
SLOW_ROWS = 8_000
"""160 sleeps of 20 ms: 3.2 s in the one replica an unplanned run gives `slow`, well past the
journal's first checkpoint (due 1 s in: `fitwork.io.journal.CHECKPOINT_SECONDS`), so a kill
after that checkpoint lands inside the run on a quiet host too."""


def test_an_appended_run_killed_midway_resumes_keeping_what_was_there(project: Path) -> None:
    import signal
    import time

    (project / "slow.py").write_text(SLOW)
    count = SLOW_ROWS
    (project / "many.jsonl").write_text("".join(json.dumps({"n": i}) + "\n"
                                                for i in range(count)))
    earlier = "".join(json.dumps({"n": -i, "run": 1}) + "\n" for i in range(1, 6))
    (project / "o.jsonl").write_text(earlier)
    command = [FITWORK, "run", "slow:pipeline", "--input", "many.jsonl", "--output",
               "o.jsonl", "-q", "--mode", "append"]
    journal = project / "o.jsonl.journal" / "journal.jsonl"
    run = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline and (
            not journal.exists() or len(journal.read_bytes().splitlines()) < 2):
        time.sleep(0.05)
    assert run.poll() is None, "160 sleeps of 20 ms in one replica outlast a checkpoint"
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    # killed after a checkpoint: the same command with --resume finishes it
    header = json.loads(journal.read_bytes().splitlines()[0])
    assert header["appended_at"] == len(earlier)
    resumed = fitwork("run", "slow:pipeline", "--input", "many.jsonl", "--output",
                      "o.jsonl", "-q", "--resume", cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    text = (project / "o.jsonl").read_text()
    assert text.startswith(earlier)
    got = [json.loads(line)["n"] for line in text[len(earlier):].splitlines()]
    assert sorted(got) == list(range(count))  # each of this run's outputs once
    assert not journal.parent.exists()
    # the digest printed is this run's whole output (what it wrote before the kill too),
    # not the earlier lines it appended after
    assert _digest(resumed.stdout) == _digest_of({"n": n, "run": 2} for n in range(count))


def _digest(stdout: str) -> str:
    said = [line.split()[2] for line in stdout.splitlines() if line.startswith("output digest")]
    assert len(said) == 1, stdout
    return said[0]


def _digest_of(values: object) -> str:
    from fitwork import OutputDigest

    digest = OutputDigest()
    for value in values:  # type: ignore[attr-defined]
        digest.add(value)
    return digest.hexdigest()


def _killed_after_a_checkpoint(command: list[str], project: Path, journal: Path) -> None:
    """Start ``command``, wait for its first checkpoint, and SIGKILL it."""
    import signal
    import time

    run = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline and (
            not journal.exists() or len(journal.read_bytes().splitlines()) < 2):
        time.sleep(0.05)
    assert run.poll() is None, "the run should outlast its first checkpoint"
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)


@pytest.mark.parametrize("output", ["o.jsonl", "o.parquet", "o/"])
def test_the_digest_after_resume_is_an_uninterrupted_runs(project: Path, output: str) -> None:
    if output.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    (project / "slow.py").write_text(SLOW)
    count = SLOW_ROWS
    (project / "many.jsonl").write_text("".join(json.dumps({"n": i}) + "\n"
                                                for i in range(count)))
    journal = project / (output.rstrip("/") + ".journal") / "journal.jsonl"
    command = ["run", "slow:pipeline", "--input", "many.jsonl", "--output", output, "-q"]
    if output.endswith("/"):  # a directory output's replicas read shards: twenty files
        (project / "shards").mkdir()
        size = count // 20
        for k in range(20):
            (project / "shards" / f"{k:02d}.jsonl").write_text("".join(
                json.dumps({"n": i}) + "\n" for i in range(k * size, (k + 1) * size)))
        command[3] = "shards/*.jsonl"
    clean = fitwork(*command[:5], "clean" + output, "-q", cwd=project)
    assert clean.returncode == 0, clean.stderr
    _killed_after_a_checkpoint([FITWORK, *command], project, journal)
    resumed = fitwork(*command, "--resume", cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    assert "wrote" in resumed.stdout and not journal.parent.exists()
    assert _digest(resumed.stdout) == _digest(clean.stdout) == \
        _digest_of({"n": n, "run": 2} for n in range(count))


NOISY = textwrap.dedent("""
    from fitwork import Pipeline, unit

    @unit
    def noisy(row):
        print("a unit's own print")
        return {"n": row["n"], "twice": 2 * row["n"]}

    pipeline = Pipeline(noisy, name="noisy")

    @unit
    def careless(row):
        if row["n"] % 2 == 0:
            return None.x
        if row["n"] % 4 == 1:
            raise ValueError("an odd row\\nand a second line")
        if row["n"] == 3:
            raise KeyError("k")
        return row

    failing = Pipeline(careless, name="careless")
""")


def test_output_dash_writes_json_lines_to_stdout_and_nothing_else(project: Path) -> None:
    (project / "noisy.py").write_text(NOISY)
    done = fitwork("run", "noisy:pipeline", "--input", "in.jsonl", "--output", "-",
                   "--record", "r.json", cwd=project)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]  # every line JSON
    assert sorted(r["n"] for r in got) == list(range(COUNT))
    assert "a unit's own print" in done.stderr and "wrote 40 outputs to stdout" in done.stderr
    assert _digest(done.stderr) == _digest_of({"n": n, "twice": 2 * n} for n in range(COUNT))
    assert RunRecord.load(project / "r.json").output_digest == _digest(done.stderr)
    assert not (project / "-").exists() and not (project / "-.journal").exists()
    for flags in (["--resume"], ["--journal", "j"], ["--mode", "append"]):
        refused = fitwork("run", "noisy:pipeline", "--input", "in.jsonl", "--output", "-",
                          *flags, cwd=project)
        assert refused.returncode == 2 and not refused.stdout, refused
        flag = " ".join(flags) if flags[0] == "--mode" else flags[0]
        assert f"{flag} with --output -: stdout keeps nothing" in refused.stderr


def test_a_failed_run_names_its_most_common_errors_with_a_count_each(project: Path) -> None:
    (project / "noisy.py").write_text(NOISY)
    done = fitwork("run", "noisy:failing", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   cwd=project)
    assert done.returncode == 1, done.stderr
    said = [line for line in done.stdout.splitlines() if " items failed: " in line]
    assert said == ["31 items failed: 20 x AttributeError: 'NoneType' object has no "
                    "attribute 'x' (unit careless); 10 x ValueError: an odd row (unit "
                    "careless); 1 x KeyError: 'k' (unit careless)"], (done.stdout, done.stderr)
    errors_said = errors(done)
    assert len(errors_said) == 1 and "31 items failed; dead letters in " in errors_said[0]
    assert "the most common: 20 x AttributeError" in errors_said[0]


def test_a_missing_input_is_the_inputs_problem_beside_an_existing_output(
        project: Path) -> None:
    (project / "o.jsonl").write_text('{"n": 1}\n')
    done = fitwork("run", "pipe:pipeline", "--input", "missing.jsonl", "--output", "o.jsonl",
                   cwd=project)
    assert done.returncode == 1 and errors(done) == [
        "error: input missing.jsonl: no such file or directory; check the --input path"]


def test_on_ray_a_start_no_node_can_place_leaves_no_journal_and_cpus_lowers_the_ask(
        project: Path, ray_cluster: object) -> None:
    ray = ["--engine", "ray", "--ray-address", ray_cluster.address]  # type: ignore[attr-defined]
    env: dict[str, str] = {}  # the session cluster's token, inherited
    run = ("run", "pipe:greedy_pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q")
    failed = fitwork(*run, *ray, cwd=project, env=env)
    assert failed.returncode == 1, failed.stderr
    assert "no item was done, so its journal o.jsonl.journal" in failed.stderr, failed.stderr
    assert not (project / "o.jsonl.journal").exists()
    lowered = fitwork(*run, *ray, "--cpus", "greedy=0.5", cwd=project, env=env)
    assert lowered.returncode == 0, lowered.stderr[-3000:]
    assert sorted(r["n"] for r in rows(project / "o.jsonl")) == list(range(COUNT))


def test_adapt_with_a_fused_plan_adapts_the_fused_unit_and_says_what_it_did(
        project: Path, pipe_profile: bytes) -> None:
    (project / "prof.json").write_bytes(pipe_profile)
    assert fitwork("plan", "pipe:pipeline", "--profile", "prof.json", "--time-limit", "5",
                   "-o", "plan.json", cwd=project).returncode == 0
    plan = json.loads((project / "plan.json").read_text())
    done = fitwork("run", "pipe:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   "--plan", "plan.json", "--adapt", "--record", "rec.json", cwd=project)
    assert done.returncode == 0, done.stderr
    assert plan["fused"]  # light stages: the plan runs them as one unit
    assert "nothing to re-balance" not in done.stderr  # a fused plan adapts too
    record = json.loads((project / "rec.json").read_text())
    said = [line for line in done.stdout.splitlines() if line.startswith("--adapt: ")]
    assert len(said) == 1, done.stdout
    if record["refits"]:  # each re-solve of the fused unit is on stdout, with its reason
        assert f"--adapt: {len(record['refits'])} re-fit" in said[0]
        assert "monolithic" in done.stdout
    elif record["wall_s"] < 4.0:  # shorter than the adapter's two 2 s windows: said so
        assert said[0].startswith("--adapt: no re-fit: the run took"), said
    else:
        assert said[0].startswith("--adapt: no re-fit"), said
    assert len((project / "o.jsonl").read_text().splitlines()) == COUNT


STORE = textwrap.dedent("""
    import fitwork
    from fitwork import Pipeline, unit

    @unit
    def store(row):
        with open("calls.txt", "a") as calls:
            calls.write("call\\n")
        if not fitwork.profiling_now():  # the side effect, kept out of every profiling pass
            with open("stored.txt", "a") as stored:
                stored.write(f"{row['n']}\\n")
        return row

    pipeline = Pipeline(store, name="store")
""")


def test_profiling_calls_a_unit_many_times_and_a_unit_can_keep_its_side_effect_out(
        project: Path) -> None:
    (project / "store.py").write_text(STORE)
    profiled = fitwork("profile", "store:pipeline", "--input", "in.jsonl", "--samples", "8",
                       "-o", "p.json", cwd=project)
    assert profiled.returncode == 0, profiled.stderr
    calls = len((project / "calls.txt").read_text().splitlines())
    assert calls > 8 * 4, calls  # the samples, cycled at each pass, and the passes after
    assert not (project / "stored.txt").exists()
    done = fitwork("run", "store:pipeline", "--input", "in.jsonl", "--output", "o.jsonl", "-q",
                   cwd=project)
    assert done.returncode == 0, done.stderr
    stored = (project / "stored.txt").read_text().splitlines()
    assert sorted(map(int, stored)) == list(range(COUNT))  # a run's calls do it, once each
