"""`import "FILE" as NAME`: an imported catalog's entries are NAME.ENTRY, so a user's own
declaration can take a catalog name; a collision that remains points at the user's line."""
from __future__ import annotations

from conftest import run_main
from dsl.syntax.format import format_source
from dsl.syntax.parser import parse

MINE = """\
import "@catalog/hardware.plan" as hw
import "@catalog/models.plan"

workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 256 seq; deadline = 2 day }
# a plan named like the catalog's device
plan b200 {
  model = qwen3_8b; workload = w; device = hw.b200; gpus = 8; mfu = 40 %
  use compute {}
}
plan peak { x = hw.h100_sxm.peak_flops }
"""


def _write(tmp_path, text, name="t.plan"):
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return f


def test_import_as_parses_and_formats():
    m = parse(MINE, "t.plan")
    assert [(i.path, i.alias) for i in m.imports] == [("@catalog/hardware.plan", "hw"), ("@catalog/models.plan", None)]
    out = format_source(MINE)
    assert out.startswith('import "@catalog/hardware.plan" as hw\n') and format_source(out) == out


def test_a_named_import_lets_a_plan_take_a_catalog_name(tmp_path):
    f = _write(tmp_path, MINE)
    rc, out, err = run_main("get", f, "peak.x", "--in", "TFLOP/s")
    assert rc == 0, err
    # the same entry read through a plain import of the same catalog file
    g = _write(tmp_path, 'import "@catalog/hardware.plan"\nplan peak { x = h100_sxm.peak_flops }\n', "plain.plan")
    assert run_main("get", g, "peak.x", "--in", "TFLOP/s")[1] == out
    rc, out, err = run_main("eval", f, "--plan", "b200")
    assert rc == 0 and "b200" in out, err


def test_a_remaining_collision_points_at_the_users_line(tmp_path):
    f = _write(tmp_path, 'import "@catalog/hardware.plan"\nplan b200 { x = 1 s }\n')
    rc, _, err = run_main("check", f)
    assert rc == 1
    first = err.splitlines()[0]
    assert first.startswith(f"{f}:2:6: error[duplicate]: 'b200' is declared twice") or \
        first.endswith("t.plan:2:6: error[duplicate]: 'b200' is declared twice")
    assert 'as hw' in err and "hw.b200" in err


def test_namespace_errors(tmp_path):
    f = _write(tmp_path, 'import "@catalog/hardware.plan" as hw\nplan p { x = hw.h100.peak_flops }\n')
    rc, _, err = run_main("check", f)
    assert rc == 1 and "error[unknown-name]" in err and "did you mean 'hw.h100_sxm'?" in err
    # unqualified, the catalog's names are not visible
    f = _write(tmp_path, 'import "@catalog/hardware.plan" as hw\nplan p { x = h100_sxm.peak_flops }\n', "u.plan")
    rc, _, err = run_main("check", f)
    assert rc == 1 and "unknown name 'h100_sxm'" in err
    f = _write(tmp_path, 'import "@catalog/hardware.plan" as hw\nimport "@catalog/models.plan" as hw\n', "d.plan")
    rc, _, err = run_main("check", f)
    assert rc == 1 and "two imports are named 'hw'" in err
    lib = _write(tmp_path, "plan q { x = 1 s }\n", "lib.plan")
    f = _write(tmp_path, f'import "{lib.name}" as lib\n', "p.plan")
    rc, _, err = run_main("check", f)
    assert rc == 1 and "imported with a name" in err


# ---------------------------------------------------------------- overriding a catalog entry

def test_a_users_file_overrides_a_catalog_entry_under_its_own_name(tmp_path):
    """`device h100_sxm extends h100_sxm { … }` replaces the catalog's entry for every reader:
    the changed field takes the user's value, the others keep the datasheet's (80 GB,
    3,350 GB/s: NVIDIA H100 SXM5 datasheet), and another file that reads the entry reads the
    override."""
    _write(tmp_path, 'import "@catalog/hardware.plan"\n'
                     'device h100_sxm extends h100_sxm { peak_flops = 900 TFLOP/s }\n', "my-hardware.plan")
    _write(tmp_path, 'import "@catalog/hardware.plan"\nplan theirs { peak = h100_sxm.peak_flops }\n', "theirs.plan")
    f = _write(tmp_path, 'import "my-hardware.plan"\nimport "theirs.plan"\nplan p { peak = h100_sxm.peak_flops; mem = h100_sxm.memory\n'
                         '  bw = h100_sxm.mem_bw }\n')
    rc, out, err = run_main("get", f, "p.peak", "--in", "TFLOP/s")
    assert rc == 0 and float(out) == 900, err
    assert float(run_main("get", f, "p.mem", "--in", "GB")[1]) == 80
    assert float(run_main("get", f, "p.bw", "--in", "GB/s")[1]) == 3350
    assert float(run_main("get", f, "theirs.peak", "--in", "TFLOP/s")[1]) == 900   # another file's reference


def test_override_needs_the_entry_from_another_file(tmp_path):
    f = _write(tmp_path, 'device h100_sxm extends h100_sxm { peak_flops = 900 TFLOP/s }\n')
    rc, _, err = run_main("check", f)
    assert rc == 1 and "error[cycle]" in err and "import the file (the catalog) that declares it" in err
    g = _write(tmp_path, 'import "@catalog/hardware.plan"\nlink h100_sxm extends h100_sxm { bandwidth = 9 GB/s }\n',
               "kind.plan")
    rc, _, err = run_main("check", g)
    assert rc == 1 and "error[duplicate]" in err   # another kind is a collision, not an override
