"""Figures: matplotlib rendering shared by plugins (Gantt charts of timelines, memory
profiles, curves) and the text timeline for terminals.  The standard figure kinds a plugin
draws (:func:`gantt`, :func:`memory_profile`) are part of the plugin contract (``dsl.plugin``);
the core's commands and reports draw with the same functions.

matplotlib is imported only here and only when a figure is drawn (``pip install
"plan-dsl[plot]"``).  SVG output is deterministic: fixed hash salt, no date metadata.
"""
from __future__ import annotations

from pathlib import Path

# colours of activity kinds (Gantt charts); unknown kinds cycle through the tail
KIND_COLORS = {
    "forward": "#4C72B0", "backward": "#DD8452", "dX": "#DD8452", "dW": "#55A868",
    "update": "#8172B3", "transfer": "#937860", "comm": "#937860", "wait": "#CCCCCC",
    "idle": "#EEEEEE", "compute": "#4C72B0", "io": "#DA8BC3", "save": "#C44E52",
    "tool": "#55A868", "model": "#4C72B0",
}
_CYCLE = ["#64B5CD", "#CCB974", "#8C8C8C", "#DA8BC3", "#C44E52"]
KIND_LETTERS = {"forward": "F", "backward": "B", "dX": "b", "dW": "w", "update": "U", "transfer": "~",
                "comm": "~", "wait": ".", "save": "S", "io": "i", "tool": "T", "model": "M", "compute": "C"}


class FigureError(Exception):
    """A figure cannot be drawn (matplotlib missing, nothing to show)."""


class MissingPackage(FigureError):
    """matplotlib is not installed (``plan`` exits 3, as for every missing optional package)."""


def _mpl():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        from dsl.syntax.diagnostics import install_hint
        raise MissingPackage(f"figures need matplotlib: {install_hint('plot')}") from e
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "plan"
    matplotlib.rcParams["path.simplify"] = False
    from matplotlib.figure import Figure
    return Figure


def new_figure(width: float = 8.0, height: float = 4.0):
    """A matplotlib Figure not attached to pyplot (no global state)."""
    return _mpl()(figsize=(width, height))


class LazyFigure:
    """A stand-in for :func:`new_figure` that makes the matplotlib Figure on first use (any
    attribute, e.g. ``fig.add_subplot``) and then forwards to it.  A plugin's
    ``draw(ev, plan, fig)`` that returns False without touching ``fig`` (its plan has nothing
    to show) then costs neither a Figure nor the import of matplotlib (≈0.5 s CPU).

    :raises MissingPackage: on first use, when matplotlib is not installed.
    """

    __slots__ = ("_size", "_fig")

    def __init__(self, width: float = 8.0, height: float = 4.0):
        self._size = (width, height)
        self._fig = None

    @property
    def used(self) -> bool:
        """Whether the Figure was made (something asked for it)."""
        return self._fig is not None

    def __getattr__(self, name):
        if self._fig is None:
            self._fig = new_figure(*self._size)
        return getattr(self._fig, name)


def save(fig, path: str | Path) -> Path:
    """Save ``fig`` deterministically (format from the suffix: .svg, .png, .pdf)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "svg"
    meta = {"svg": {"Date": None, "Creator": "plan"}, "pdf": {"CreationDate": None, "Creator": "plan"},
            "png": {"Software": "plan"}}.get(fmt)
    fig.savefig(path, format=fmt, metadata=meta, bbox_inches="tight")
    return path


def color_of(kind: str, seen: dict) -> str:
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    if kind not in seen:
        seen[kind] = _CYCLE[len(seen) % len(_CYCLE)]
    return seen[kind]


def gantt(ax, tl, unit: str = "ms", title: str = "", lanes: list[str] | None = None, labels: bool = True):
    """Draw timeline ``tl`` (with a computed schedule) as a Gantt chart on ``ax``.

    One row per lane (an activity's ``lane`` or its resource), bars coloured by ``kind``,
    ``style="hatched"`` bars hatched, ``label`` written inside bars wide enough to hold it.
    """
    from dsl.engine.units import parse_unit

    sc = tl.schedule
    if sc is None:
        raise FigureError(f"timeline '{tl.name}' of '{tl.plan}' has no schedule")
    scale = float(parse_unit(unit).scale)
    rows: list[str] = list(lanes or [])
    acts = list(tl.activities.values())
    for a in acts:
        lane = a.lane or a.resource or a.id
        if lane not in rows:
            rows.append(lane)
    y = {r: i for i, r in enumerate(rows)}
    extra: dict = {}
    used_kinds: dict[str, str] = {}
    idx = sc.index()
    span = sc.makespan / scale or 1.0
    bars: dict[tuple, list] = {}         # (row, colour, hatched) -> bars: one collection each
    for a in acts:
        i = idx[a.id]
        s, d = sc.start[i] / scale, (sc.finish[i] - sc.start[i]) / scale
        if d <= 0:
            continue
        c = color_of(a.kind or "compute", extra)
        used_kinds.setdefault(a.kind or "compute", c)
        bars.setdefault((y[a.lane or a.resource or a.id], c, a.style == "hatched"), []).append((s, d))
        if labels and a.label and d > span / 60:
            ax.text(s + d / 2, y[a.lane or a.resource or a.id], a.label, ha="center", va="center", fontsize=6,
                    color="white")
    for (row, c, hatched), xs in bars.items():      # in order of first appearance: deterministic
        # white edges separate bars; on bars a few pixels wide (thousands of slots) they would
        # hide the colour, so those are drawn without
        thin = sum(d for _, d in xs) / len(xs) < span / 200
        ax.broken_barh(xs, (row - 0.4, 0.8), facecolors=c, edgecolor="white", linewidth=0 if thin else 0.5,
                       hatch="//" if hatched else None)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, span * 1.01)
    if title:
        ax.set_title(title, fontsize=9)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=c, label=k) for k, c in used_kinds.items()], fontsize=7,
              loc="upper right", ncol=min(6, len(used_kinds)), frameon=False, bbox_to_anchor=(1, 1.12))


def memory_profile(ax, profile, unit: str = "MiB", label: str | None = None, time_unit: str = "ms"):
    """Step plot of a pool's live bytes over time, the peak marked."""
    from dsl.engine.units import parse_unit

    scale = float(parse_unit(unit).scale)
    ts = float(parse_unit(time_unit).scale)
    xs = [0.0] + [t / ts for t, _ in profile.steps]
    ys = [0.0] + [v / scale for _, v in profile.steps]
    line, = ax.step(xs, ys, where="post", label=label or profile.pool)
    ax.plot([profile.time / ts], [profile.peak / scale], "o", color=line.get_color(), ms=3)
    ax.set_xlabel(f"time ({time_unit})")
    ax.set_ylabel(unit)


def text_timeline(tl, width: int = 100, unit: str = "ms") -> str:
    """A compact terminal Gantt chart: one row per lane, one letter per activity kind."""
    from dsl.engine.units import format_number, parse_unit

    sc = tl.schedule
    if sc is None:
        return f"timeline '{tl.name}': no schedule"
    span = sc.makespan or 1.0
    rows: dict[str, list[str]] = {}
    idx = sc.index()
    for a in tl.activities.values():
        lane = a.lane or a.resource or a.id
        row = rows.setdefault(lane, [" "] * width)
        i = idx[a.id]
        c0 = int(round(sc.start[i] / span * width))
        c1 = int(round(sc.finish[i] / span * width))
        ch = KIND_LETTERS.get(a.kind, (a.kind[:1] or "#"))
        if a.style == "hatched":
            ch = ch.lower() if ch.isupper() else ch
        for c in range(c0, max(c1, c0 + (1 if sc.finish[i] > sc.start[i] else 0))):
            if c < width:
                row[c] = ch
    name_w = max((len(r) for r in rows), default=4)
    scale = float(parse_unit(unit).scale)
    lines = [f"{tl.plan} · timeline '{tl.name}' · makespan {format_number(span / scale)} {unit} "
             f"(1 column ≈ {format_number(span / width / scale)} {unit})"]
    for lane, row in rows.items():
        lines.append(f"  {lane.ljust(name_w)} |{''.join(row).rstrip()}")
    kinds = sorted({a.kind for a in tl.activities.values() if a.kind})
    if kinds:
        lines.append("  " + "  ".join(f"{KIND_LETTERS.get(k, k[:1])}={k}" for k in kinds))
    return "\n".join(lines)
