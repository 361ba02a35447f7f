"""What ``use layout`` shows besides its quantities (:mod:`plugins.training.layout`, which
registers them): the ``layout-search`` table and figure of ``use layout_search`` (the layouts
``plan search`` ranks, drawn as step time against memory per GPU), and the parameters and
persistent state one GPU of each pipeline stage holds (:func:`stage_params`, the
``parameters-per-stage`` table).
"""
from __future__ import annotations


def search_table(ws, plan):
    if "layout_search" not in ws.decls[plan].uses:
        return None
    from plugins.training import layout_search as search
    res = search.run(ws, plan)
    return search.table(res)


def draw_search(ws, plan, fig) -> bool:
    """Step time against memory per GPU of every valid layout, coloured by tp, the Pareto
    front joined, the best layout marked, usable memory and the deadline's step budget."""
    if "layout_search" not in ws.decls[plan].uses:
        return False
    from plugins.training import layout_search as search
    res = search.run(ws, plan)
    c = res.columns
    valid = c["valid"]
    if not valid.any():
        return False
    gib = 2.0 ** 30
    ax = fig.subplots()
    fig.set_size_inches(7, 4.2)
    for t in sorted(set(c["t"][valid].tolist())):
        sel = valid & (c["t"] == t)
        ax.plot(c["memory"][sel] / gib, c["step"][sel], "o", ms=3.5, alpha=0.75, label=f"tp = {t}")
    front = res.pareto
    ax.plot(c["memory"][front] / gib, c["step"][front], "-", color="black", lw=0.8, label="Pareto front")
    ax.plot([c["memory"][res.best] / gib], [c["step"][res.best]], "*", color="black", ms=11, label="best")
    ax.axvline(res.meta["usable"] / gib, color="#C44E52", lw=1, label="usable memory")
    m = res.meta
    if m["deadline"] and m["steps"]:
        budget = (m["deadline"] - m["reserved"]) / (m["steps"] * (1 + m["overhead"]))
        ax.axhline(budget, color="#8172B2", lw=1, ls="--", label=f"step budget {budget:.3g} s")
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.set_title(f"{plan}: {int(valid.sum())} valid of {len(res)} layouts ({m['activations']} activations)",
                 fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


def stage_params(ws, plan: str) -> list[dict] | None:
    """Parameters one GPU of each pipeline stage holds under the plan's layout.

    Dense blocks are split by tp (their norm vectors too — replicated in practice, 2·h per
    block, well under 0.01 % of a block), routed experts by ep·etp; the word embedding sits on the
    first stage and the LM head on the last (a tied embedding is copied to the last stage when
    pp > 1, as Megatron-LM does; learned position embeddings are part of the embedding);
    parameters outside the blocks, the embedding and the head (the final norm) are counted on
    the last stage.  Layers go to chunks in
    pipeline order (``stage_layers`` or an even split); with ``virtual`` = v rank r holds chunks
    r, r + p, …; dense-first layers (``dense_layers``) are the first ones.

    :returns: one dict per stage — ``stage``, ``layers`` (count), ``dense``/``moe`` (layer
        counts), ``params`` (per GPU), ``state_bytes`` (persistent training state per GPU with
        the ZeRO sharding over dp, experts over dp·tp·cp/(ep·etp)) — or None when the plan has
        no `use layout`.
    """
    pre = f"{plan}.layout."
    if pre + "tp" not in ws.nodes or f"{plan}.model" not in ws.nodes:
        return None

    def val(nid, default=None):
        return float(ws.base_value(nid)) if nid in ws.nodes and ws.base_value(nid) is not None else default

    def opt(nid):
        """An optional parameter's Python value, None when not given."""
        return ws.python_value(nid) if nid in ws.nodes and ws.base_value(nid) is not None else None

    model = ws.python_value(f"{plan}.model").name
    t, p, c, e, v = (int(ws.python_value(pre + k)) for k in ("tp", "pp", "cp", "ep", "virtual"))
    et = int(opt(pre + "etp")) if opt(pre + "etp") is not None else t
    L = int(val(f"{model}.layers"))
    E = val(f"{model}.experts")
    Ld = int(val(f"{model}.dense_layers", 0)) if E else L
    if E:
        dense_lp = val(f"{model}.dense_layer_params", 0.0)
        exp_layer = val(f"{model}.expert_params") / (L - Ld)
        moe_other = val(f"{model}.moe_layer_params") - exp_layer
    else:
        dense_lp, exp_layer, moe_other = val(f"{model}.layer_params"), 0.0, 0.0
    emb, head = val(f"{model}.embedding_params", 0.0), val(f"{model}.lm_head_params", 0.0)
    N = val(f"{model}.params")
    rest = N - Ld * dense_lp - (L - Ld) * (moe_other + exp_layer) - emb - head
    sl = ws.list_value(pre + "stage_layers") if pre + "stage_layers" in ws.nodes and opt(pre + "stage_layers") else None
    chunks = [int(x) for x in sl] if sl else [L // (p * v)] * (p * v)
    if sum(chunks) != L:
        return None
    d = val(f"{plan}.dp", 1.0)
    d_exp = d * t * c / (e * et)
    z = int(ws.python_value(pre + "zero"))
    bpp = {k: (val(f"{plan}.{k}_memory", 0.0) / N) for k in ("weights", "grads", "master", "optimizer")}
    shard = {"weights": z >= 3, "grads": z >= 2, "master": z >= 1, "optimizer": z >= 1}
    rows, start = [], 0
    bounds = []
    for n in chunks:
        bounds.append((start, start + n))
        start += n
    for r in range(p):
        dense_n = moe_n = 0
        for k in range(r, p * v, p):
            a, b = bounds[k]
            dense_n += max(0, min(b, Ld) - a)
            moe_n += max(0, b - max(a, Ld))
        dense_part = dense_n * dense_lp / t + moe_n * moe_other / t
        if r == 0:
            dense_part += emb / t
        if r == p - 1:
            dense_part += head / t + rest + (emb / t if head == 0 and p > 1 else 0)
        exp_part = moe_n * exp_layer / (e * et)
        state = sum(bpp[k] * (dense_part / (d if shard[k] else 1) + exp_part / (d_exp if shard[k] else 1))
                    for k in bpp)
        rows.append({"stage": r, "layers": dense_n + moe_n, "dense": dense_n, "moe": moe_n,
                     "params": dense_part + exp_part, "state_bytes": state})
    return rows


def stage_table(ws, plan):
    from dsl.plugin import Table
    rows = stage_params(ws, plan)
    if rows is None or len(rows) < 2:
        return None
    from dsl.plugin import convert
    even = sum(r["params"] for r in rows) / len(rows)
    out = tuple((r["stage"], r["layers"], r["moe"], round(r["params"] / 1e9, 4), round(convert(r["state_bytes"], "GiB"), 3),
                 f"{(r['params'] / even - 1) * 100:+.1f} %") for r in rows)
    return Table(("stage", "layers", "of them MoE", "params per GPU (B)", "state per GPU (GiB)", "vs even split"), out,
                 ("dense blocks ÷ tp, routed experts ÷ ep·etp; embedding (with learned positions) on the first stage, "
                  "LM head and final norm on the last; memory_per_gpu spreads parameters evenly over the stages",))
