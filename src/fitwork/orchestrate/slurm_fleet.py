"""Slurm nodes (``scontrol show node --json``, ``sinfo --json``, or ``scontrol -o`` text) as
node types.

Per node: CPUs, RealMemory (MiB), GRES (``gpu:h100:8(S:0-1)``), features and partitions.
Nodes that are down, drained, failing or not responding are left out with the reason.
Alike nodes (partition, CPUs, memory, GPUs, features) form a node type named after its
partition and GPU types; each GPU type (else, for one untyped GPU GRES, a feature) names a
catalog class, and a node that declares several GPU types keeps each.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from fitwork.hardware.catalog import Catalog, catalog
from fitwork.orchestrate.cluster import Accelerators, ClusterError, ClusterFleet, ClusterNodeType
from fitwork.orchestrate.products import product_class

SLURM_MB = 2**20
_UNUSABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING",
             "FUTURE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "MAINTENANCE",
             "REBOOT_REQUESTED", "REBOOT_ISSUED", "UNKNOWN", "INVALID_REG", "INVALID"}
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_GRES = re.compile(r"^([^:()]+)(?::([^:()]+))?(?::(\d+))?")


def _number(value: Any) -> float | None:
    """A Slurm number: plain, a digit string, or ``{"set": true, "number": N}`` (23.x+)."""
    if isinstance(value, Mapping):
        return _number(value.get("number")) if value.get("set", True) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value.strip()):
        return float(value)
    return None


def _words(value: Any, sep: str = ",") -> list[str]:
    """A Slurm list: a list, or a separated string ("gpu,h100"); "(null)" is none."""
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    if not value or str(value) in ("(null)", "N/A"):
        return []
    return [w for w in str(value).split(sep) if w]


def parse_scontrol_text(text: str) -> list[dict[str, Any]]:
    """Nodes from ``scontrol show node -o`` (one ``Key=Value ...`` line per node)."""
    nodes = []
    for line in text.splitlines():
        marks = list(_FIELD.finditer(line))
        if not marks or marks[0].group(1) != "NodeName":
            continue
        fields = {}
        for mark, after in zip(marks, [*marks[1:], None], strict=True):
            end = after.start() if after is not None else len(line)
            fields[mark.group(1)] = line[mark.end():end].strip()
        nodes.append({"name": fields.get("NodeName"), "cpus": fields.get("CPUTot"),
                      "real_memory": fields.get("RealMemory"), "gres": fields.get("Gres"),
                      "features": fields.get("AvailableFeatures"),
                      "partitions": _words(fields.get("Partitions")),
                      "state": _words(fields.get("State"), "+"),
                      "reason": fields.get("Reason")})
    return nodes


def _json_nodes(doc: Any, place: str) -> list[dict[str, Any]]:
    """Nodes from ``scontrol show node --json`` or ``sinfo --json`` (22.05 to 24.x shapes)."""
    if not isinstance(doc, Mapping):
        raise ClusterError(f"{place}: expected the JSON of `scontrol show node --json` or "
                           "`sinfo --json`")
    if isinstance(doc.get("nodes"), list):
        return [dict(n) for n in doc["nodes"]]
    if isinstance(doc.get("sinfo"), list):  # sinfo --json of 23.x+: one entry per node set
        nodes = []
        for entry in doc["sinfo"]:
            names = (entry.get("nodes") or {}).get("nodes") or []
            for name in names:
                nodes.append({"name": name, "cpus": (entry.get("cpus") or {}).get("maximum"),
                              "real_memory": (entry.get("memory") or {}).get("maximum"),
                              "gres": (entry.get("gres") or {}).get("total"),
                              "features": (entry.get("features") or {}).get("total"),
                              "partitions": [(entry.get("partition") or {}).get("name")],
                              "state": (entry.get("node") or {}).get("state")})
        return nodes
    raise ClusterError(f"{place}: no nodes in it; give the JSON of `scontrol show node "
                       "--json` or `sinfo --json`")


def parse_gres(gres: str) -> list[tuple[str | None, int]]:
    """(GPU type, count) for each GPU type of a node's GRES, in its order: [("h100", 8)] of
    "gpu:h100:8(S:0-1),shard:4", [("h100", 2), ("v100", 1)] of "gpu:h100:2,gpu:v100:1";
    [] for none."""
    found: dict[str | None, int] = {}
    for entry in re.split(r",(?![^()]*\))", gres or ""):
        match = _GRES.match(entry.strip())
        if match and match.group(1) == "gpu":
            kind, count = match.group(2), match.group(3)
            if count is None and kind is not None and kind.isdigit():
                kind, count = None, kind
            found[kind] = found.get(kind, 0) + int(count or 1)
    return list(found.items())


def _accelerators(gpus: list[tuple[str | None, int]], features: tuple[str, ...],
                  known: Catalog) -> list[Accelerators]:
    """One `Accelerators` per GPU type of a node; the catalog class from the GRES type, else
    (for a node of one untyped GRES gpu) from a feature."""
    found = []
    for kind, count in gpus:
        device_class, suggestions = (product_class(kind, known) if kind else (None, ()))
        for feature in features if device_class is None and len(gpus) == 1 else ():
            match, _ = product_class(feature, known)
            if match:
                device_class, suggestions = match, ()
                break
        found.append(Accelerators(product=kind or "gpu (no GRES type)",
                                  device_class=device_class, count=count,
                                  gres=f"gpu:{kind}" if kind else "gpu",
                                  suggestions=suggestions))
    return found


def _state(node: Mapping[str, Any]) -> list[str]:
    words = node.get("state")
    states = _words(words, "+") if not isinstance(words, list) else [str(w) for w in words]
    states += [str(f) for f in node.get("state_flags") or []]
    return [s.upper().rstrip("*~#!%$@^-") for s in states]


def read_slurm(doc: Any, name: str = "slurm", known: Catalog | None = None,
               place: str = "nodes") -> ClusterFleet:
    """A Slurm cluster's node types from its nodes (parsed JSON, or the text of ``-o``)."""
    known = known or catalog()
    nodes = parse_scontrol_text(doc) if isinstance(doc, str) else _json_nodes(doc, place)
    excluded: dict[str, str] = {}
    groups: dict[tuple[Any, ...], ClusterNodeType] = {}
    for node in nodes:
        node_name = str(node.get("name") or node.get("hostname") or "?")
        states = _state(node)
        bad = [s for s in states if s in _UNUSABLE]
        if any(str(s).endswith("*") for s in _words(node.get("state"), "+")):
            bad.append("NOT_RESPONDING")
        if bad:
            excluded[node_name] = "state " + "+".join(dict.fromkeys(bad))
            continue
        cpus, memory = _number(node.get("cpus")), _number(node.get("real_memory"))
        if not cpus or not memory:
            excluded[node_name] = "no CPUs or RealMemory"
            continue
        gres = node.get("gres")
        gpus = parse_gres(gres if isinstance(gres, str) else ",".join(_words(gres)))
        features = tuple(sorted(_words(node.get("features") or node.get("active_features"))))
        partitions = [p for p in _words(node.get("partitions")) if p]
        accels = tuple(_accelerators(gpus, features, known))
        partition = partitions[0] if partitions else None
        key = (partition, cpus, memory, accels, features)
        group = groups.get(key)
        if group is None:
            group = groups[key] = ClusterNodeType(
                name="", count=0, cores=cpus, memory=int(memory * SLURM_MB),
                accelerators=accels[0] if accels else None, more_accelerators=accels[1:],
                partition=partition, features=features,
                sources={"cores": "Slurm node CPUs", "memory": "Slurm node RealMemory",
                         "devices": "Slurm node GRES gpu types (else a feature)"})
        group.count += 1
        group.nodes.append(node_name)
    types = sorted(groups.values(), key=lambda t: (t.accelerators is None, t.nodes[0]))
    seen: dict[str, int] = {}
    for t in types:
        kind = "-".join(a.product for a in t.all_accelerators) or "cpu"
        base = re.sub(r"[^a-z0-9.-]+", "-", f"{t.partition or 'slurm'}-{kind}".lower())
        seen[base] = seen.get(base, 0) + 1
        t.name = base if seen[base] == 1 else f"{base}-{seen[base]}"
    return ClusterFleet("slurm", name, types, excluded)


def _slurm(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    command = shutil.which(args[0])
    if command is None:
        raise ClusterError(f"no Slurm client on this host ({args[0]} not found); run on a "
                           "login node, or pass --nodes FILE from `sinfo --json`")
    try:
        return subprocess.run([command, *args[1:]], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"the Slurm controller did not answer `{' '.join(args)}` within "
                           f"{timeout:g} s; check `sinfo`") from None


def read_live(name: str = "slurm", timeout: float = 20.0,
              known: Catalog | None = None) -> ClusterFleet:
    """The controller's nodes: JSON where this Slurm gives it (``sinfo --json`` from 22.05,
    ``scontrol show node --json`` from 23.02), else ``scontrol show node -o`` text."""
    for command in (["sinfo", "--json"], ["scontrol", "show", "node", "--json"]):
        done = _slurm(command, timeout)
        if done.returncode == 0 and done.stdout.lstrip().startswith("{"):
            try:
                return read_slurm(json.loads(done.stdout), name, known, " ".join(command))
            except (ValueError, ClusterError):
                continue  # a JSON plugin that answers oddly: the text form is always there
    done = _slurm(["scontrol", "show", "node", "-o"], timeout)
    if done.returncode != 0:
        why = " ".join((done.stderr or done.stdout).split())[:300] or f"exit {done.returncode}"
        raise ClusterError(f"cannot read the Slurm controller: scontrol show node: {why}; "
                           "check `sinfo`, or pass --nodes FILE")
    return read_slurm(done.stdout, name, known, "scontrol show node -o")
