"""The device catalog: complete, sourced, dense figures; lookups by name, alias and NVML name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from fitwork.errors import FitworkError
from fitwork.hardware.catalog import (
    FIGURES,
    CatalogError,
    UnknownDeviceClass,
    catalog,
    load_catalog,
    parse_catalog,
)

REQUIRED = [
    "cpu-x86", "cpu-arm", "K80", "P100", "V100", "T4", "A10G", "L4", "L40S", "A100-40GB",
    "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "GB200", "GB300", "MI250X", "MI300X",
    "MI250", "GH200", "Gaudi2", "Max-1550", "SN40L",
]  # fmt: skip
CATALOG_FILE = Path(__file__).resolve().parents[2] / "src" / "fitwork" / "hardware" / "catalog.yaml"

GPU_SPECS = Path(__file__).resolve().parents[1] / "data" / "gpu-specs"
FROM_GPU_SPECS = {
    "A100-80GB": "a100_sxm",
    "H100-SXM": "h100_sxm",
    "H100-PCIe": "h100_pcie",
    "H200": "h200_sxm",
    "B200": "b200_sxm",
    "GB200": "gb200",
    "GB300": "gb300",
    "L4": "l4",
    "L40S": "l40s",
}


def test_the_catalog_holds_every_required_class() -> None:
    assert set(REQUIRED) <= set(catalog().names)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_figure_is_stated_and_sourced(name: str) -> None:
    device = catalog().get(name)
    for figure in FIGURES:
        assert device.sources[figure].strip(), f"{name}.{figure} has no source"
        value = getattr(device, figure)
        if value is None:
            assert "no public" in device.sources[figure].lower(), f"{name}.{figure}"
        elif figure != "price_per_hour":
            assert value > 0
    assert device.fp16_flops > 0 and device.memory_bytes > 0  # never null


def test_prices_are_known_for_all_but_the_unlisted_parts() -> None:
    unpriced = {d.name for d in catalog().classes if d.price_per_hour is None}
    assert unpriced == {"GB300", "MI250X", "MI250", "GH200", "Gaudi2", "Max-1550", "SN40L"}


def test_prices_are_on_one_stated_basis_the_accelerator_with_its_host_share() -> None:
    header = CATALOG_FILE.read_text().split("as_of:")[0]
    assert "WITH ITS SHARE OF THE HOST" in header
    for device in catalog().of_kind("gpu", "accelerator"):
        if device.price_per_hour is None:
            continue
        text = " ".join(device.sources["price_per_hour"].split()).lower()
        assert "gpu only" not in text, device.name
        if "gcp snapshot" in text:  # Google bills the GPU apart: the host share is added
            assert device.host_share_per_hour, device.name
            assert "host" in text
        else:
            assert "host included" in text, device.name


@pytest.mark.parametrize(("name", "gpu", "host"), [
    ("V100", 2.48, 0.38), ("T4", 0.35, 0.19), ("A100-40GB", 2.93391, 0.73948),
    ("A100-80GB", 1.8462, 1.09962), ("H100-SXM", 4.20076, 9.46006 / 8),
    ("H200", 74.49392 / 8, 12.266 / 8),
])
def test_google_prices_are_the_gpu_plus_its_host_share(name: str, gpu: float,
                                                        host: float) -> None:
    device = catalog().get(name)
    assert device.price_per_hour == pytest.approx(gpu + host, abs=1e-5)
    assert device.host_share_per_hour == pytest.approx(host, abs=1e-5)


def test_mi300x_is_priced_host_included_like_the_rest() -> None:
    mi300x = catalog().get("MI300X")
    assert mi300x.price_per_hour == 1.99
    assert "host included" in mi300x.sources["price_per_hour"]
    assert catalog().get("H100-SXM").price_per_hour > catalog().get("H100-SXM").host_share_per_hour


@pytest.mark.parametrize(("name", "fp16", "memory_gib", "bandwidth"), [
    ("MI250", 362.1e12, 128, 3.2768e12),
    ("GH200", 989e12, 96, 4.0e12),
    ("Gaudi2", 432e12, 96, 2.46e12),
    ("Max-1550", 838.9e12, 128, 3.2768e12),
    ("SN40L", 638e12, 64, None),
])
def test_the_added_classes_state_their_datasheet_figures(name: str, fp16: float,
                                                         memory_gib: int,
                                                         bandwidth: float | None) -> None:
    device = catalog().get(name)
    assert device.fp16_flops == fp16
    assert device.memory_bytes == memory_gib << 30
    assert device.memory_bandwidth == bandwidth


def test_figures_no_vendor_publishes_are_null_and_say_so() -> None:
    sn40l, gaudi2 = catalog().get("SN40L"), catalog().get("Gaudi2")
    assert sn40l.fp32_flops is None and sn40l.memory_bandwidth is None
    assert "no public" in sn40l.sources["memory_bandwidth"].lower()
    assert gaudi2.fp32_flops is None and gaudi2.fp16_flops == 432e12
    assert "estimate" in catalog().get("Max-1550").sources["fp16_flops"].lower()


def test_a_null_figure_without_a_reason_is_rejected() -> None:
    entry = _one_class(memory_bandwidth=None)
    with pytest.raises(CatalogError, match="memory_bandwidth is null but its source"):
        parse_catalog({"classes": [entry]})


def test_a_host_share_above_the_price_is_rejected() -> None:
    with pytest.raises(CatalogError, match=r"host_share_per_hour 9\.0 exceeds price_per_hour"):
        parse_catalog({"classes": [_one_class(host_share_per_hour=9.0)]})


@pytest.mark.parametrize(
    ("name", "dense"),
    [("V100", 125e12), ("H100-SXM", 989e12), ("B200", 2.25e15), ("GB300", 2.5e15)],
)
def test_fp16_figures_are_the_dense_datasheet_ones(name: str, dense: float) -> None:
    assert catalog().get(name).fp16_flops == dense


def test_no_class_states_a_sparse_figure() -> None:
    # The sparse figures of H100 SXM, A100 and L4 are 1979, 624 and 242 TFLOP/s.
    assert catalog().get("H100-SXM").fp16_flops < 1.0e15
    assert catalog().get("A100-80GB").fp16_flops == 312e12
    assert catalog().get("L4").fp16_flops == 121e12


def test_half_precision_is_never_slower_than_fp32() -> None:
    for device in catalog().classes:
        if device.fp32_flops is not None:
            assert device.fp16_flops >= device.fp32_flops, device.name


@pytest.mark.parametrize("name", sorted(FROM_GPU_SPECS))
def test_gpu_specs_classes_cite_it(name: str) -> None:
    sources = catalog().get(name).sources
    assert f"gpu-specs {FROM_GPU_SPECS[name]}.yaml" in sources["fp16_flops"]
    assert "gpu-specs" in sources["memory_bytes"]


@pytest.mark.parametrize("name", sorted(FROM_GPU_SPECS))
def test_gpu_specs_figures_are_copied_exactly(name: str) -> None:
    spec = yaml.safe_load((GPU_SPECS / f"{FROM_GPU_SPECS[name]}.yaml").read_text())["gpu"]
    device = catalog().get(name)
    assert device.fp16_flops == spec["bfloat16_tc_flops"]
    assert device.memory_bytes == spec["mem_capacity"]
    assert device.memory_bandwidth == spec["mem_bw"]
    assert device.power_watts == spec["power"]


def test_lookup_ignores_case_and_separators_and_accepts_aliases() -> None:
    known = catalog()
    assert known.get("h100-sxm").name == "H100-SXM"
    assert known.get("H100 SXM").name == "H100-SXM"
    assert known.get("nvidia h100 80gb hbm3").name == "H100-SXM"
    assert known.get("x86_64").name == "cpu-x86"
    assert known.get("aarch64").name == "cpu-arm"
    assert "a100_80gb" in known
    assert "A100" not in known


@pytest.mark.parametrize(
    ("nvml_name", "expected"),
    [
        ("Tesla K80", "K80"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA GB300", "GB300"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("AMD Instinct MI250", "MI250"),
        ("Intel Data Center GPU Max 1550", "Max-1550"),
    ],
)
def test_nvml_names_map_to_classes(nvml_name: str, expected: str) -> None:
    found = catalog().match(nvml_name)
    assert found is not None and found.name == expected


def test_an_unknown_nvml_name_matches_nothing() -> None:
    assert catalog().match("NVIDIA GeForce RTX 4090") is None
    assert catalog().match("Tesla V100-SXM2-32GB") is None  # other memory size, other class


def test_an_unknown_class_suggests_the_closest_names() -> None:
    with pytest.raises(UnknownDeviceClass) as caught:
        catalog().get("H10")
    assert str(caught.value) == (
        "unknown device class 'H10'; did you mean H100-SXM, H100-PCIe, H200?"
    )
    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value, FitworkError)
    assert caught.value.suggestions == ["H100-SXM", "H100-PCIe", "H200"]


def test_a_name_like_nothing_lists_the_known_classes() -> None:
    with pytest.raises(UnknownDeviceClass, match="known classes: cpu-x86, cpu-arm, K80"):
        catalog().get("zzzz")


def test_the_default_catalog_is_loaded_once() -> None:
    assert catalog() is catalog()


def test_the_catalog_and_its_license_ship_as_package_data() -> None:
    package = resources.files("fitwork.hardware")
    assert "classes:" in package.joinpath("catalog.yaml").read_text()
    license_text = package.joinpath("LICENSE.gpu-specs").read_text()
    assert license_text.startswith("Attribution: ")
    assert "095f58a" in license_text.splitlines()[0]
    assert "Apache License" in license_text


def _one_class(**changes: object) -> dict[str, object]:
    """A valid catalog entry (a copy of T4), with ``changes`` applied."""
    entry = catalog().get("T4").model_dump()
    entry.update(changes)
    return entry


def test_a_figure_without_a_source_is_rejected() -> None:
    entry = _one_class()
    del entry["sources"]["power_watts"]  # type: ignore[attr-defined]
    with pytest.raises(CatalogError, match=r"classes\[0\]: class T4: no source for power_watts"):
        parse_catalog({"classes": [entry]})


def test_two_classes_sharing_an_alias_are_rejected() -> None:
    first = _one_class()
    second = _one_class(name="T4-copy", aliases=["tesla t4"])
    with pytest.raises(CatalogError, match="'tesla t4' names both T4 and T4-copy"):
        parse_catalog({"classes": [first, second]})


def test_a_negative_figure_is_rejected_with_its_path() -> None:
    with pytest.raises(CatalogError, match=r"classes\[0\]\.fp32_flops: Input should be greater"):
        parse_catalog({"classes": [_one_class(fp32_flops=-1.0)]})


def test_catalog_files_that_cannot_be_read_say_so(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("classes: [unclosed\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(broken)


def test_a_catalog_file_loads_like_the_default(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"as_of": "test", "classes": [_one_class()]}))
    loaded = load_catalog(path)
    assert loaded.names == ["T4"]
    assert loaded.get("tesla t4") == catalog().get("T4")


def test_device_kind_is_the_catalogs_for_its_classes_and_read_from_other_names() -> None:
    from fitwork.hardware import DeviceKind, device_kind

    known = catalog()
    assert all(device_kind(d.name) is d.kind for d in known.classes)
    assert device_kind("x86_64") is DeviceKind.CPU  # an alias, no cpu- prefix
    assert device_kind("NVIDIA H100 80GB HBM3") is DeviceKind.GPU
    assert device_kind("Gaudi2") is DeviceKind.ACCELERATOR
    assert device_kind("cpu-epyc-9654") is DeviceKind.CPU  # not in the catalog
    assert device_kind("my-npu") is DeviceKind.GPU
    assert known.get("cpu-x86").is_cpu and not known.get("Gaudi2").is_cpu
