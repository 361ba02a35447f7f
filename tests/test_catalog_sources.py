"""The hardware catalog: each added entry carries its source, and reads back as published.

Figures are the vendors' (each entry's `source` names the document): dense BF16 is half the
"with sparsity" figure where the datasheet prints only that one.
"""
from __future__ import annotations

import pytest

import dsl
from dsl.engine.units import convert

CAT = 'import "@catalog/hardware.plan"\nplan p { x = 1 s }\n'

# (entry.field, value, unit) as the datasheets print them
PUBLISHED = [
    ("gb200.peak_flops", 360e3 / 72 / 2, "TFLOP/s"),    # NVL72: 360 PFLOP/s sparse for 72 GPUs
    ("gb200.mem_bw", 576e3 / 72, "GB/s"),               # 576 TB/s for 72 GPUs
    ("mi300x.peak_flops", 1307.4, "TFLOP/s"), ("mi300x.memory", 192, "GB"), ("mi300x.mem_bw", 5300, "GB/s"),
    ("mi325x.memory", 256, "GB"), ("mi325x.mem_bw", 6000, "GB/s"),
    ("gaudi3.peak_flops", 1835, "TFLOP/s"), ("gaudi3.memory", 128, "GB"),
    ("tpu_v5e.peak_flops", 197, "TFLOP/s"), ("tpu_v5e.mem_bw", 819, "GB/s"),
    ("tpu_v5p.peak_flops", 459, "TFLOP/s"), ("tpu_v5p.memory", 95, "GB"), ("tpu_v5p.mem_bw", 2765, "GB/s"),
    ("l4.peak_flops", 242 / 2, "TFLOP/s"), ("l4.memory", 24, "GB"), ("l4.mem_bw", 300, "GB/s"),
    ("l40s.peak_flops", 362.05, "TFLOP/s"), ("l40s.memory", 48, "GB"), ("l40s.mem_bw", 864, "GB/s"),
    ("nvlink5.bandwidth", 1800 / 2, "GB/s"),            # 1.8 TB/s both directions
    ("nvlink4.bandwidth", 900 / 2, "GB/s"),             # 900 GB/s both directions
    ("ib_ndr_400g.bandwidth", 400, "Gbit/s"), ("roce_400g.bandwidth", 400, "Gbit/s"),
    ("ib_xdr_800g.bandwidth", 800, "Gbit/s"),
]


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    f = tmp_path_factory.mktemp("cat") / "c.plan"
    f.write_text(CAT, encoding="utf-8")
    return dsl.load(f)


@pytest.mark.parametrize("name,value,unit", PUBLISHED)
def test_entry_reads_as_published(cat, name, value, unit):
    assert convert(float(cat.base_value(name)), unit) == pytest.approx(value, rel=1e-9)


def test_added_entries_name_their_source(cat):
    for name, _, _ in PUBLISHED:
        if name.startswith("nvlink4"):
            continue            # an older entry, sourced in its comment
        assert cat.nodes[name].source, name


def test_a_users_file_extends_and_sidesteps_entries(tmp_path):
    f = tmp_path / "mine.plan"
    f.write_text('import "@catalog/hardware.plan" as hw\n'
                 'device b200 extends hw.b200 { memory = 192 GB }\n'
                 'plan p { a = b200.memory; b = hw.b200.memory; c = b200.peak_flops }\n', encoding="utf-8")
    ev = dsl.load(f)
    assert convert(float(ev.base_value("p.a")), "GB") == 192 and convert(float(ev.base_value("p.b")), "GB") == 180
    assert ev.base_value("p.c") == ev.base_value("hw.b200.peak_flops")
