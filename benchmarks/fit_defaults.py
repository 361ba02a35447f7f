"""Fit the catalog devices' `sustained_efficiency` (and, per format, `fp8_sustained_efficiency`) on the validation corpus's fit set.

Run:  python benchmarks/fit_defaults.py           # fit and print the fitted values
      python benchmarks/fit_defaults.py --write   # and write them into specs/catalog/hardware.plan
                                                  # and specs/data/validation/fitted-defaults.csv
      python benchmarks/fit_defaults.py --check   # exit 1 when the catalog or the CSV is stale

For every catalog device with 16-bit (BF16/FP16) runs in the fit set of
specs/data/validation/training-runs.csv (the split and its rules: specs/data/validation/README.md),
the runs are written as plans exactly as benchmarks/validation_table.py prices them, each stating
its measured step time (tokens per step / tokens per second, or Narayanan et al.'s FLOPs per
iteration / (GPUs × TFLOP/s per GPU)), and one `use calibrate { plans = [...]; fit =
["sustained_efficiency"] }` fits the device's fraction of its GEMM curve that whole training steps
sustain — least squares on the runs' relative step-time errors, through the same step model
`plan eval` uses.  Then, for every device with FP8 runs in the fit set, the same fit of
`fp8_sustained_efficiency` (the share of the FP8 GEMM curve those steps sustain) on them, with the
16-bit share just fitted.  Nothing from the test set enters the fit.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import validation_table as vt  # noqa: E402

CATALOG = ROOT / "specs" / "catalog" / "hardware.plan"
FITTED = ROOT / "specs" / "data" / "validation" / "fitted-defaults.csv"
FIELD = "sustained_efficiency"
FP8_FIELD = "fp8_sustained_efficiency"
#: catalog devices built on the same compute die as a fitted device: they take its fitted shares
#: (what whole steps sustain of the device's own GEMM curve: the kernels the step does not list are
#: the same).  H200 SXM and H800 SXM: the GH100 of the H100 SXM with the same dense BF16/FP8 peaks
#: (NVIDIA H200 datasheet; the H800 differs only in interconnect), carrying its GEMM curve; the
#: 500 W H100 (h100_500w) carries its own curve, measured at that power limit
SAME_COMPUTE = {"h100_sxm": ("h200", "h800", "h100_500w")}
#: fit-set sources that publish the same runs with one mechanism switched on and off (rule 3 of
#: specs/data/validation/README.md): each fits only the device field of that mechanism, on its
#: pairs' throughput ratios, and takes no part in the sustained-share fits.  torchtitan's async-TP
#: page: vanilla TP against async TP (the TP collectives decomposed under their matmuls) ->
#: ``tp_overlap_efficiency``, the share of the ideal 1 − 1/tp the decomposition hides
MECHANISMS = {"torchtitan-asynctp-2025-06": ("tp_overlap_efficiency", "_vanilla_", "_async_")}
COLUMNS = ["device", "field", "value_percent", "runs", "rms_error_percent", "max_error_percent"]


def measured_step(r: dict) -> float:
    """The row's measured seconds per step from its printed metric."""
    tokens, g, m = int(r["global_batch"]) * int(r["seq_len"]), int(r["gpus"]), float(r["measured"])
    metric = r["metric"]
    if metric == "tokens_per_s":
        return tokens / m
    if metric == "tokens_per_s_per_gpu":
        return tokens / (m * g)
    if metric == "tflops_per_gpu":
        return vt.narayanan_flops(r) / (g * m * 1e12)
    raise ValueError(f"{r['id']}: a {metric} measurement cannot be fitted on")


def fit_rows(fp8: bool = False) -> dict:
    """{catalog device: [rows]} of the fit set's 16-bit runs (``fp8``: its FP8 runs)."""
    out: dict = {}
    for r in vt.read_rows():
        if (r["split"] == "fit" and r["source_id"] not in MECHANISMS
                and r["precision"].upper().startswith("FP8") == fp8):
            out.setdefault(r["catalog_device"].split(":")[0], []).append(r)
    return out


def rows_text(device: str, rows: list[dict], stated: str, measured: bool = False) -> tuple[str, str]:
    """(the .plan text of ``rows``' plans on ``device_fitting``, a device deriving from the catalog's
    ``device`` with the fields ``stated`` ("f = v %; …"), and that device's name); ``measured``:
    each plan also states its measured step (``measured_step_time``).  A link the rows declare
    alike (nvlink3 = 300 GB/s) is declared once."""
    fitted = f"{device}_fitting"
    parts = ['import "../catalog/hardware.plan"', f"device {fitted} extends {device} {{ {stated} }}"]
    links: set = set()
    for r in rows:
        text = vt.plan_text(r).replace('import "../catalog/hardware.plan"\n', "")
        text = text.replace(f"device = {device}\n", f"device = {fitted}\n").replace(f" extends {device} {{",
                                                                                   f" extends {fitted} {{")
        if measured:
            text = text.replace(f"plan {r['id']} {{\n",
                                f"plan {r['id']} {{\n  measured_step_time = {measured_step(r)!r} s\n", 1)
        keep = []
        for ln in text.split("\n"):
            if ln.startswith("link ") and ln in links:
                continue
            if ln.startswith("link "):
                links.add(ln)
            keep.append(ln)
        parts.append("\n".join(keep))
    return "\n".join(parts), fitted


def fit_text(device: str, rows: list[dict], field: str = FIELD, fixed: dict | None = None) -> str:
    """One .plan: every row's plan stating its measured step, and the calibrating plan fitting
    ``field`` with the device fields ``fixed`` ({field: percent}) stated as given."""
    # the catalog device with the fitted field stated at 100 % (the start of the fit, whatever the
    # catalog holds now), under its own name so that every run reads it
    stated = "; ".join([f"{k} = {v} %" for k, v in (fixed or {}).items()] + [f"{field} = 100 %"])
    text, fitted = rows_text(device, rows, stated, measured=True)
    names = ", ".join(r["id"] for r in rows)
    return text + f"\nplan fit {{\n  device = {fitted}\n  use calibrate {{ plans = [{names}]; fit = [\"{field}\"] }}\n}}\n"


def fit(device: str, rows: list[dict], field: str = FIELD, fixed: dict | None = None) -> dict:
    import dsl
    res = dsl.load(vt.PLAN_PATH, text=fit_text(device, rows, field, fixed))
    detail = res.computed_detail(f"fit.{field}")
    errs = [abs(x["error"]) for x in detail["rows"]]
    return {"device": device, "field": field, "value_percent": f"{100 * detail['values'][field]:.1f}",
            "runs": ";".join(r["id"] for r in rows), "rms_error_percent": f"{100 * detail['rms']:.2f}",
            "max_error_percent": f"{max(errs):.2f}"}


def family(device: str) -> tuple:
    """The catalog devices on ``device``'s compute die (:data:`SAME_COMPUTE`), fitted one first."""
    for root, same in SAME_COMPUTE.items():
        if device == root or device in same:
            return (device,) + tuple(d for d in (root,) + same if d != device)
    return (device,)


def _mechanism_times(rows: list[dict], field: str, value: str) -> dict:
    """{row id: predicted step seconds} of ``rows`` (one device) with the device's ``field`` stated
    as ``value`` % — the plans validation_table.py prices, on a derived device."""
    import dsl
    text, _ = rows_text(rows[0]["catalog_device"].split(":")[0], rows, f"{field} = {value} %")
    res = dsl.load(vt.PLAN_PATH, text=text)
    return {r["id"]: float(res[r["id"]].value("step_time", "s")) for r in rows}


def fit_mechanism(source: str, rows: list[dict]) -> dict:
    """Fit a mechanism's device field on an on/off source's pairs: least squares over the pairs of
    (ln predicted − ln measured) throughput ratio on/off.  The field η scales the hidden share, and
    below the compute it hides behind the step is linear in it: t_on(η) = t_off − η·(t_off −
    t_on(100 %)); the fit is checked by pricing the pairs again at the fitted value
    (:func:`plugins.training.fitting.least_squares_bounded`, the one-field fit ``use calibrate``
    runs)."""
    import numpy as np
    from plugins.training.fitting import least_squares_bounded
    field, off, on = MECHANISMS[source]
    pairs = [(r, next(x for x in rows if x["id"] == r["id"].replace(off, on))) for r in rows if off in r["id"]]
    full = _mechanism_times(rows, field, "100")
    meas = {r["id"]: measured_step(r) for r in rows}

    def residuals(x):
        eta = x[0]
        return np.array([math.log(full[a["id"]] / (full[a["id"]] - eta * (full[a["id"]] - full[b["id"]])))
                         - math.log(meas[a["id"]] / meas[b["id"]]) for a, b in pairs])
    (eta,), _, status, _ = least_squares_bounded(residuals, [0.5], [0.0], [1.0])
    if status <= 0:
        raise SystemExit(f"{source}: the fit of {field} did not converge")
    value = f"{100 * eta:.1f}"
    got = _mechanism_times(rows, field, value)
    errs = []
    for a, b in pairs:
        lin = full[a["id"]] - float(value) / 100 * (full[a["id"]] - full[b["id"]])
        if abs(got[b["id"]] / lin - 1) > 1e-9:
            raise SystemExit(f"{b['id']}: the step is not linear in {field} (the hidden share reaches the "
                             "compute); fit it by pricing each value")
        errs.append(100 * ((got[a["id"]] / got[b["id"]]) / (meas[a["id"]] / meas[b["id"]]) - 1))
    rms = math.sqrt(sum(e * e for e in errs) / len(errs))
    return {"device": rows[0]["catalog_device"].split(":")[0], "field": field, "value_percent": value,
            "runs": ";".join(r["id"] for r in rows), "rms_error_percent": f"{rms:.2f}",
            "max_error_percent": f"{max(abs(e) for e in errs):.2f}"}


def mechanism_rows() -> dict:
    """{source: [rows]} of the fit set's on/off sources (:data:`MECHANISMS`)."""
    out: dict = {}
    for r in vt.read_rows():
        if r["split"] == "fit" and r["source_id"] in MECHANISMS:
            out.setdefault(r["source_id"], []).append(r)
    return out


def source_text(row: dict) -> str:
    n = len(row["runs"].split(";"))
    if row["field"] not in (FIELD, FP8_FIELD):
        return (f"fitted by benchmarks/fit_defaults.py on the validation corpus's fit set: {n // 2} on/off pairs "
                f"({row['runs'].replace(';', ', ')}), least squares on their throughput ratios (RMS error "
                f"{row['rms_error_percent']} %), specs/data/validation/fitted-defaults.csv")
    what = "FP8" if row["field"] == FP8_FIELD else "16-bit"
    return (f"fitted by benchmarks/fit_defaults.py on the validation corpus's fit set ({n} {what} runs: "
            f"{row['runs'].replace(';', ', ')}; RMS error {row['rms_error_percent']} %), "
            "specs/data/validation/fitted-defaults.csv")


def catalog_with(rows: list[dict], text: str) -> str:
    """The catalog text with each fitted device field's line (added or replaced), and the same
    value in each device of :data:`SAME_COMPUTE` of it."""
    for row in rows:
        for device in family(row["device"]):
            src = source_text(row) if device == row["device"] else (
                f"the {row['device']} fit ({source_text(row)}): the same compute die; not measured on this "
                "device")
            text = _with_line(text, device, row["field"], row["value_percent"], src)
    return text


def _with_line(text: str, device: str, field: str, value: str, src: str) -> str:
    """The catalog text with ``device``'s ``field`` line set to ``value`` % (added or replaced)."""
    m = re.search(rf"^device {device} \{{\n(.*?)^\}}", text, re.S | re.M)
    if m is None:
        raise SystemExit(f"no device {device} in {CATALOG}")
    body = m.group(1)
    line = f'  {field} = {value} % source "{src}"\n'
    new = (re.sub(rf"^  {field} = .*\n", line, body, flags=re.M) if re.search(rf"^  {field} = ", body, re.M)
           else body + line)
    return text[:m.start(1)] + new + text[m.end(1):]


def read_fitted() -> list[dict]:
    with open(FITTED, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the catalog and fitted-defaults.csv")
    ap.add_argument("--check", action="store_true", help="exit 1 when the catalog or the CSV is stale")
    args = ap.parse_args(argv)
    got = [fit(d, rs) for d, rs in sorted(fit_rows().items())]
    sixteen = {g["device"]: g["value_percent"] for g in got}
    got += [fit(d, rs, FP8_FIELD, {FIELD: sixteen[d]} if d in sixteen else None)
            for d, rs in sorted(fit_rows(fp8=True).items())]
    got += [fit_mechanism(src, rs) for src, rs in sorted(mechanism_rows().items())]
    for g in got:
        print(f"{g['device']}: {g['field']} = {g['value_percent']} % on {len(g['runs'].split(';'))} runs "
              f"(RMS error {g['rms_error_percent']} %, largest {g['max_error_percent']} %)")
    catalog = CATALOG.read_text(encoding="utf-8")
    if args.check:
        ok = FITTED.exists() and read_fitted() == got and catalog_with(got, catalog) == catalog
        print("the catalog and fitted-defaults.csv are current" if ok else "stale: rerun with --write")
        return 0 if ok else 1
    if args.write:
        with open(FITTED, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(got)
        CATALOG.write_text(catalog_with(got, catalog), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
