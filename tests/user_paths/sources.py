"""The pipelines a new user writes, as the files they write them in: a module, a file, scripts.

Every source holds the same four stages, so every case expects the same outputs: ``parse``
(a row to an id and a number), ``square`` (raises on some rows, kills its own worker the
first time it meets others, as a native decoder that segfaults would), ``shift`` and
``label``.  ``process`` is the same work as one plain function, for ``--decompose``.
"""

from __future__ import annotations

import textwrap

ROWS = 300
RAISES = 97, 13
"""Rows whose id is 13 modulo 97 raise in ``square`` in the cases with raising rows."""
KILLS = 89, 7
"""Rows whose id is 7 modulo 89 kill their worker (SIGKILL) the first time, in the cases
with killing rows: such a row says ``"fail": "kill:DIR"``, and a marker file per row in
DIR says the row has killed once already.  (What a row does travels in the row, not the
environment: a Ray worker has the environment of its node, not of the driver.)"""

POISONS = 101, 42
"""Rows whose id is 42 modulo 101 kill every worker that meets them (``"fail": "poison"``),
in the test of such rows through the command line."""

STAGES = textwrap.dedent('''
    import os
    import signal
    from pathlib import Path


    def _maybe_fail(ident, fail):
        if fail == "raise":
            raise ValueError(f"row {ident} is bad")
        if fail == "poison":  # kills every worker that meets it
            os.kill(os.getpid(), signal.SIGKILL)
        if fail and fail.startswith("kill:"):
            mark = Path(fail[len("kill:"):]) / str(ident)
            try:
                mark.touch(exist_ok=False)
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)


    def parse(row):
        return {"id": int(row["id"]), "x": float(row["x"]), "fail": row.get("fail") or ""}


    def square(item):
        _maybe_fail(item["id"], item["fail"])
        return {**item, "y": item["x"] * item["x"]}


    def shift(item):
        return {**item, "y": item["y"] + 1.0}


    def label(item):
        return {"id": item["id"], "y": round(item["y"], 6),
                "tag": "even" if item["id"] % 2 == 0 else "odd"}
''')

MODULE = STAGES + textwrap.dedent('''
    import fitwork

    pipeline = fitwork.Pipeline(parse, square, shift, label, name="userpipe")


    def process(row):
        ident = int(row["id"])
        x = float(row["x"])
        _maybe_fail(ident, row.get("fail") or "")
        y = x * x
        y = y + 1.0
        tag = "even" if ident % 2 == 0 else "odd"
        return {"id": ident, "y": round(y, 6), "tag": tag}
''')

RUNNER = textwrap.dedent('''
    import json
    import sys
    from pathlib import Path

    import fitwork
    import fitwork.io.inputs


    def main(pipeline):
        case = json.loads(sys.argv[1])
        options = {}
        if case["engine"] != "local":
            options = {"address": case["address"]}
            if case["engine"] == "ray_tasks":
                options["task_replicas"] = True
        placement = fitwork.Plan.load(case["plan"]) if case["plan"] else None
        sink = None
        if case["input_kind"] == "shards":
            source = fitwork.Source.files(str(Path(case["input"]) / "*.jsonl"))
            sink = fitwork.Sink.files(case["output"])
        else:
            source = fitwork.io.inputs.read_items(case["input"], csv_types=True)
        engine = "ray" if case["engine"].startswith("ray") else "local"
        with fitwork.run(pipeline, source, engine=engine, placement=placement, output=sink,
                         dead_letter=case["dead_letter"], **options) as result:
            outputs = list(result)
        if sink is None:
            with open(case["output"], "w") as out:
                for output in outputs:
                    out.write(json.dumps(output) + "\\n")
        sys.exit(1 if result.record.failed_items else 0)
''')

MAIN_PLAIN = STAGES + RUNNER + textwrap.dedent('''
    if __name__ == "__main__":
        main(fitwork.Pipeline(parse, square, shift, label, name="userpipe"))
''')

MAIN_UNIT = RUNNER + STAGES.replace("\ndef ", "\n@fitwork.unit\ndef ").replace(
    "@fitwork.unit\ndef _maybe_fail", "def _maybe_fail") + textwrap.dedent('''
    if __name__ == "__main__":
        main(fitwork.Pipeline(parse, square, shift, label, name="userpipe"))
''')

MAIN_CLASS = STAGES.replace("def square(", "def _square(") + RUNNER + textwrap.dedent('''
    @fitwork.unit(name="square")
    class Square:
        """Built once per replica, as a model would be."""

        def __init__(self):
            self.power = 2

        def __call__(self, item):
            _maybe_fail(item["id"], item["fail"])
            return {**item, "y": item["x"] ** self.power}


    if __name__ == "__main__":
        main(fitwork.Pipeline(parse, Square, shift, label, name="userpipe"))
''')

SCRIPTS = {"main_plain": MAIN_PLAIN, "main_unit": MAIN_UNIT, "main_class": MAIN_CLASS}
