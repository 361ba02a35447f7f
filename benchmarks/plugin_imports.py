"""The import graph of plugins/: modules, edges, cycles, imports going up the concern levels, and
imports of the core outside the contract ``dsl.plugin`` — the figures the architecture test
keeps at zero, printed for a tree (run it on an older checkout to compare).

    python benchmarks/plugin_imports.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main(argv=None) -> int:
    import argparse
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    import networkx as nx
    import test_architecture as T

    mods = {T._module_name(p): p for p in T._files("plugins")}
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, p in mods.items():
        for target, names, line in T._imports(p):
            for t in (target, *(f"{target}.{n}" for n in names)):
                if t in mods and t != m and mods[t].name != "__init__.py":
                    g.add_edge(m, t, line=line)
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    up = sorted(f"{a}:{d['line']} -> {b}" for a, b, d in g.edges(data=True)
                if getattr(T, "_plugin_level", None) and None not in (T._plugin_level(a), T._plugin_level(b))
                and T._plugin_level(b) > T._plugin_level(a))
    internal = sorted(f"{T._module_name(p)}:{line} imports {t}" for p in T._files("plugins")
                      for t, _, line in T._imports(p)
                      if t.startswith("dsl") and not (t == "dsl.plugin" or t.startswith("dsl.plugin.")))
    lines = {}
    for m, p in mods.items():
        pkg = m.split(".")[1] if m.count(".") >= 2 else "(root)"
        lines[pkg] = lines.get(pkg, 0) + p.read_text(encoding="utf-8").count("\n")
    print(f"plugin modules {len(mods)}, import edges {g.number_of_edges()}")
    print(f"cycles {len(cycles)}: " + "; ".join(" <-> ".join(c) for c in cycles))
    print(f"imports up the levels {len(up)}" + "".join(f"\n  {u}" for u in up))
    print(f"imports of the core outside dsl.plugin {len(internal)}" + "".join(f"\n  {i}" for i in internal))
    print("lines per package: " + ", ".join(f"{k} {v}" for k, v in sorted(lines.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
