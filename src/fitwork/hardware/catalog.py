"""The device catalog: kinds of silicon and their sourced peak figures, loaded from catalog.yaml.

The numbers live in ``catalog.yaml`` beside this module (data, not code); this module only
validates them and answers queries::

    catalog.yaml --load_catalog()--> Catalog --get("h100-sxm")---------> DeviceClass
                                             --match("NVIDIA H100 80GB HBM3")--^  (or None)

Every figure of every class carries a source; a class whose figure has none fails to load.
A figure no vendor publishes (an SN40L's FP32 rate, say) is ``null`` with a source saying
"no public ..."; prices are all on one basis, stated in ``DeviceClass``.
"""

from __future__ import annotations

import difflib
import functools
import re
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    model_validator,
)

from fitwork.errors import FitworkError
from fitwork.hardware.validation import one_line

SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (about ten times faster), else
PyYAML's own: the catalog is read at the start of every run."""

__all__ = [
    "FIGURES",
    "Catalog",
    "CatalogError",
    "DeviceClass",
    "UnknownDeviceClass",
    "catalog",
    "load_catalog",
    "parse_catalog",
]

FIGURES = (
    "fp16_flops",
    "fp32_flops",
    "memory_bytes",
    "memory_bandwidth",
    "power_watts",
    "price_per_hour",
)
"""The figures every device class states, each with an entry in its ``sources``."""

_SEPARATORS = re.compile(r"[\s_\-]+")
_VENDOR_WORDS = ("nvidia ", "tesla ", "amd ")
_MAX_SUGGESTIONS = 3


class CatalogError(FitworkError, ValueError):
    """The catalog file is missing, not YAML, or states a class that does not validate."""


class UnknownDeviceClass(FitworkError, KeyError):
    """A device class name (or alias) that the catalog does not hold; suggests close names."""

    def __init__(self, name: str, suggestions: list[str], known: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        if suggestions:
            hint = f"did you mean {', '.join(suggestions)}?"
        else:
            hint = f"known classes: {', '.join(known)}"
        super().__init__(f"unknown device class {name!r}; {hint}")

    def __str__(self) -> str:
        """The message itself, not KeyError's quoted repr of it."""
        return str(self.args[0])


def _key(name: str) -> str:
    """A lookup key: lower case, separators collapsed, a leading vendor word dropped."""
    key = _SEPARATORS.sub(" ", name.strip().lower())
    for word in _VENDOR_WORDS:
        if key.startswith(word) and len(key) > len(word):
            key = key[len(word) :]
    return key


def _shared_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


class DeviceKind(StrEnum):
    """What a device class is: host cores (capacity counted in cores), a GPU, or another
    accelerator (Gaudi, an RDU); a catalog class states it, `device_kind` gives any name's."""

    CPU = "cpu"
    GPU = "gpu"
    ACCELERATOR = "accelerator"


CPU_PREFIX = "cpu-"
"""How a device class outside the catalog says it is host cores (``cpu-epyc``)."""


class DeviceClass(BaseModel):
    """One kind of silicon with its peak figures; ``sources`` says where each one comes from.

    A device is one ``unit`` of the class: one GPU, or one vCPU for a CPU class. FLOP/s are
    dense (never the 2:4-sparsity figure), bandwidth in bytes per second. ``price_per_hour``
    is USD per device-hour on demand, on ONE basis: the accelerator with its share of the
    host (CPU and memory), e.g. an 8-GPU instance's price / 8; a CPU class is priced per
    vCPU. ``host_share_per_hour`` is the part of that price that pays for the host, where the
    source separates it (``None`` otherwise). ``fp32_flops``, ``memory_bandwidth``,
    ``power_watts`` and ``price_per_hour`` are ``None`` where no public figure exists, and then
    their source says "no public ...".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    kind: DeviceKind
    vendor: str = Field(min_length=1)
    unit: str = Field(min_length=1)
    fp16_flops: float = Field(gt=0, description="dense FP16/BF16 FLOP/s")
    fp32_flops: float | None = Field(gt=0, description="FP32 FLOP/s on vector cores")
    memory_bytes: int = Field(gt=0)
    memory_bandwidth: float | None = Field(gt=0, description="bytes per second")
    power_watts: float | None = Field(gt=0)
    price_per_hour: float | None = Field(
        ge=0, description="USD per device-hour on demand, with the device's share of the host")
    host_share_per_hour: float | None = Field(
        default=None, ge=0, description="the part of price_per_hour that pays for the host")
    aliases: tuple[str, ...] = ()
    sources: dict[str, str]

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> DeviceClass:
        """Reject a class whose figures lack a source, or whose sources name no figure."""
        missing = [f for f in FIGURES if not self.sources.get(f, "").strip()]
        if missing:
            raise ValueError(f"class {self.name}: no source for {', '.join(missing)}")
        extra = sorted(set(self.sources) - set(FIGURES))
        if extra:
            raise ValueError(f"class {self.name}: sources for unknown figures {', '.join(extra)}")
        unstated = [f for f in FIGURES if getattr(self, f) is None
                    and "no public" not in self.sources[f].lower()]
        if unstated:
            raise ValueError(f"class {self.name}: {', '.join(unstated)} is null but its source "
                             "does not say 'no public ...'; give the figure or say why not")
        if self.host_share_per_hour is not None and (
                self.price_per_hour is None or self.host_share_per_hour > self.price_per_hour):
            raise ValueError(f"class {self.name}: host_share_per_hour "
                             f"{self.host_share_per_hour} exceeds price_per_hour "
                             f"{self.price_per_hour}; the host share is part of the price")
        return self

    @field_serializer("kind")
    def _kind_as_written(self, kind: DeviceKind) -> str:
        """The kind as the catalog file writes it (a plain string in dumps)."""
        return kind.value

    @property
    def is_cpu(self) -> bool:
        """Whether a device of this class is a CPU core (capacity counted in cores)."""
        return self.kind is DeviceKind.CPU

    def figures(self) -> dict[str, float | int | None]:
        """The six figures by name, in catalog order."""
        return {name: getattr(self, name) for name in FIGURES}


class Catalog(BaseModel):
    """Device classes, looked up by name or alias regardless of case and separators."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    as_of: str = ""
    classes: tuple[DeviceClass, ...] = Field(min_length=1)
    _index: dict[str, DeviceClass] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _names_and_aliases_are_unambiguous(self) -> Catalog:
        """Reject two classes that share a name or alias once case and separators are ignored."""
        index: dict[str, DeviceClass] = {}
        for device in self.classes:
            for label in (device.name, *device.aliases):
                key = _key(label)
                other = index.get(key)
                if other is not None and other.name != device.name:
                    raise ValueError(f"{label!r} names both {other.name} and {device.name}")
                index[key] = device
        self._index = index
        return self

    @property
    def names(self) -> list[str]:
        """Class names in catalog order."""
        return [device.name for device in self.classes]

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a class name or alias in this catalog."""
        return isinstance(name, str) and _key(name) in self._index

    def get(self, name: str) -> DeviceClass:
        """The class called ``name`` (or with that alias); raises ``UnknownDeviceClass``."""
        found = self._index.get(_key(name))
        if found is None:
            raise UnknownDeviceClass(name, self.suggest(name), self.names)
        return found

    def match(self, nvml_name: str) -> DeviceClass | None:
        """The class of a GPU as NVML names it ("Tesla V100-SXM2-16GB"); ``None`` if unknown."""
        return self._index.get(_key(nvml_name))

    def suggest(self, name: str) -> list[str]:
        """Up to three class names close to ``name`` by difflib ratio (at least 0.5) or prefix.

        Names sharing a longer leading run with ``name`` come first, then higher ratios, then
        catalog order: ``"H10"`` suggests H100-SXM, H100-PCIe, H200.
        """
        key = _key(name)
        ranked = []
        for order, device in enumerate(self.classes):
            other = _key(device.name)
            prefix = _shared_prefix(key, other)
            ratio = difflib.SequenceMatcher(None, key, other).ratio()
            if ratio >= 0.5 or (key and other.startswith(key)):
                ranked.append((-prefix, -ratio, order, device.name))
        return [entry[-1] for entry in sorted(ranked)[:_MAX_SUGGESTIONS]]

    def of_kind(self, *kinds: str) -> list[DeviceClass]:
        """Classes whose kind is one of ``kinds``, in catalog order."""
        return [device for device in self.classes if device.kind in kinds]


def parse_catalog(data: Any, place: str = "catalog") -> Catalog:
    """A validated ``Catalog`` from already-loaded YAML data; ``CatalogError`` names ``place``."""
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(f"{place}: {one_line(exc)}") from None


def load_catalog(path: Path | str | None = None) -> Catalog:
    """The catalog at ``path``, or the one shipped with fitwork when ``path`` is ``None``."""
    if path is None:
        place = "fitwork/hardware/catalog.yaml"
        source = resources.files("fitwork.hardware").joinpath("catalog.yaml")
    else:
        place = str(path)
        source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{place}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)  # safe: no arbitrary objects
    except yaml.YAMLError as exc:
        raise CatalogError(f"{place}: not valid YAML: {' '.join(str(exc).split())}") from None
    return parse_catalog(data, place)


@functools.cache
def catalog() -> Catalog:
    """The default catalog shipped with fitwork, loaded and validated once per process."""
    return load_catalog()


def device_kind(device_class: str, known: Catalog | None = None) -> DeviceKind:
    """The kind of ``device_class``: the catalog's (``known``, else the default one) for a
    class it names or aliases; otherwise host cores for a ``cpu-...`` name, else a GPU."""
    known = known if known is not None else catalog()
    if device_class in known:
        return known.get(device_class).kind
    return DeviceKind.CPU if device_class.startswith(CPU_PREFIX) else DeviceKind.GPU
