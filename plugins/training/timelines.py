"""Generic figures of every plan's timelines: a Gantt chart per timeline and the memory of
each pool over time.  Registered like any third-party plugin; plugins with their own
figures (pipeline schedules, checkpoint streams) add richer ones under their own names."""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import FigureSpec


def _timelines(ws, plan):
    return [tl for (p, _), tl in sorted(ws.timelines.items()) if p == plan and tl.schedule is not None]


def _draw_gantt(ws, plan, fig) -> bool:
    from dsl.plugin import gantt

    tls = [tl for tl in _timelines(ws, plan) if tl.activities]
    if not tls:
        return False
    fig.set_size_inches(9, 1.2 + sum(0.35 * len({a.lane or a.resource or a.id for a in tl.activities.values()}) + 0.8
                                     for tl in tls))
    axes = fig.subplots(len(tls), 1, squeeze=False)
    for ax, tl in zip(axes[:, 0], tls):
        unit = "ms" if tl.schedule.makespan < 10 else ("s" if tl.schedule.makespan < 36000 else "h")
        gantt(ax, tl, unit=unit, title=f"{plan}: {tl.name}")
    fig.tight_layout()
    return True


def _draw_memory(ws, plan, fig) -> bool:
    from dsl.plugin import memory_profile

    tls = [tl for tl in _timelines(ws, plan) if tl.profiles]
    if not tls:
        return False
    axes = fig.subplots(len(tls), 1, squeeze=False)
    for ax, tl in zip(axes[:, 0], tls):
        peak = max(p.peak for p in tl.profiles.values())
        unit = "GiB" if peak >= 2 ** 30 else "MiB"
        tu = "ms" if tl.schedule.makespan < 10 else "s"
        for pool in sorted(tl.profiles):
            memory_profile(ax, tl.profiles[pool], unit=unit, time_unit=tu)
        ax.set_title(f"{plan}: memory on timeline '{tl.name}'", fontsize=9)
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return True


@hookimpl
def plan_figures_register():
    return [FigureSpec("timeline", "Gantt chart of each timeline", _draw_gantt,
                       "activities by resource, coloured by kind"),
            FigureSpec("memory", "Live memory per pool over each timeline", _draw_memory,
                       "step functions of the bytes held; dots mark each peak")]
