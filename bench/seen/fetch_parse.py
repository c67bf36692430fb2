"""Trained since stop 53 (held out before): I/O and CPU in one unit.

One call waits 12 ms for a service and then parses its answer, a 60 KB JSON document, in
pure Python under the GIL (about 1.5 ms), as an HTTP client that decodes its response does;
the unit declares ``io=8``.  A light unit follows.
"""

from __future__ import annotations

import json
import time

from bench_shape import Shape

from fitwork import Pipeline, unit

WAIT_S = 0.012
ROWS = 600


def _body(number: int) -> str:
    """The service's answer for ``number``: 600 rows of a few fields."""
    return json.dumps([{"id": number * ROWS + k, "name": f"item-{k}", "price": (k * 37) % 1000,
                        "tags": ["a", "b", "c"][: k % 4]} for k in range(ROWS)])


BODIES = [_body(n) for n in range(64)]


@unit(io=8)
def fetch_parse(number: int) -> list[dict[str, object]]:
    """Wait for the service, then decode its JSON."""
    time.sleep(WAIT_S)
    return json.loads(BODIES[number % len(BODIES)])


@unit
def total(rows: list[dict[str, object]]) -> int:
    """The priced total."""
    return sum(int(str(r["price"])) for r in rows)


SHAPE = Shape(Pipeline(fetch_parse, total, name="fetch_parse"),
              "I/O and CPU in one unit: 12 ms wait then a 60 KB JSON parse (io=8)", 4000,
              (2, 4, 8, 16), {"fetch_parse": (1, 2, 3), "total": (1, 2)})
