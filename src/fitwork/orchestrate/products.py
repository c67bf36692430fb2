"""Accelerator product names as clusters give them, mapped to catalog classes."""

from __future__ import annotations

import re

from fitwork.hardware.catalog import Catalog

_SPLIT = re.compile(r"[\s_\-]+")
_VENDOR = {"nvidia", "amd", "tesla", "intel"}
_SIZE = re.compile(r"(\d+)gb?", re.IGNORECASE)


def product_class(product: str, known: Catalog,
                  memory: int | None = None) -> tuple[str | None, tuple[str, ...]]:
    """(catalog class, ()) for a product name, or (None, the closest classes).

    Tried in turn: the name as given ("NVIDIA-H100-80GB-HBM3", "AMD_Instinct_MI300X_OAM",
    "nvidia-tesla-t4"), then without trailing words ("... MI300X OAM" is an MI300X), then
    its model word as the leading part of class names when nothing but a size follows it
    ("nvidia-h100-80gb" and Slurm's "h100" are H100-SXM; where several classes share it,
    the one nearest ``memory`` bytes, else an SXM part; "H100-NVL" is not an H100-SXM).
    """
    words = [w for w in _SPLIT.split(product.strip()) if w]
    for end in range(len(words), 0, -1):
        if all(w.lower() in _VENDOR for w in words[:end]):
            break
        found = known.match(" ".join(words[:end]))
        if found is not None and not found.is_cpu:
            return found.name, ()
    rest = [w for w in words if w.lower() not in _VENDOR]
    model, tail = (rest[0], rest[1:]) if rest else ("", [])
    sized = [int(m.group(1)) * 2**30 for w in tail if (m := _SIZE.fullmatch(w))]
    memory = memory if memory is not None else (sized[0] if sized else None)
    if model and len(sized) == len(tail):
        heads = [d for d in known.classes if not d.is_cpu
                 and d.name.split("-")[0].lower() == model.lower()]
        if heads:
            if memory is not None:
                heads.sort(key=lambda d: abs(d.memory_bytes - memory))
            else:
                heads.sort(key=lambda d: ("SXM" not in d.name, d.name))
            return heads[0].name, ()
    return None, _closest(" ".join(words), known, memory)


def _closest(name: str, known: Catalog, memory: int | None) -> tuple[str, ...]:
    """Up to three classes close by name, else nearest by device memory."""
    close = [n for n in known.suggest(name) if not known.get(n).is_cpu] if name else []
    if len(close) < 3 and memory is not None:
        by_memory = sorted((d for d in known.classes if not d.is_cpu),
                           key=lambda d: abs(d.memory_bytes - memory))
        close += [d.name for d in by_memory if d.name not in close]
    return tuple(close[:3])
