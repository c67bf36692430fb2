"""``python -m fitwork.orchestrate.wait ADDRESS TYPE=N ... [--timeout S]``: wait for Ray nodes.

The sbatch script runs it before the pipeline: the Ray engine reads the nodes' labels when
it starts, so every planned node must have joined first.  Exit 0 once the cluster has at
least N live nodes labelled with each TYPE; exit 1 with one line when it has not in time.
"""

from __future__ import annotations

import sys
import time

from fitwork.errors import FitworkError
from fitwork.hardware.ray_cluster import NODE_TYPE_LABEL, connect, live_nodes


def main(argv: list[str]) -> int:
    """Wait for the nodes ``argv`` names; the exit status says whether they came."""
    timeout = 300.0
    if "--timeout" in argv:
        at = argv.index("--timeout")
        timeout = float(argv[at + 1])
        argv = argv[:at] + argv[at + 2:]
    address, wanted = argv[0], {k: int(v) for k, v in (a.split("=", 1) for a in argv[1:])}
    deadline = time.monotonic() + timeout
    have: dict[str, int] = {}
    try:
        connect(address, timeout=min(60.0, timeout))
        while True:
            have, shown = {}, []
            for node in live_nodes(timeout=10.0):
                label = (node.get("Labels") or {}).get(NODE_TYPE_LABEL)
                if label:
                    have[label] = have.get(label, 0) + 1
                    amounts = {k: v for k, v in sorted(node["Resources"].items())
                               if ":" not in k and "memory" not in k}
                    shown.append(f"{label} {amounts}")
            if all(have.get(k, 0) >= n for k, n in wanted.items()):
                print(f"ray nodes ready: {'; '.join(sorted(shown))}", flush=True)
                return 0
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
    except FitworkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"error: Ray nodes did not join within {timeout:g} s: wanted {wanted}, have {have}",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
