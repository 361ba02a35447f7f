"""Plugin records, the plugin manager factory and the typed facade over the hooks.

Built-in plugins are ordinary modules registered through the ``plan.plugins`` entry-point
group, exactly like third-party ones.  ``get_plugins()`` builds the manager (no manager
exists at import time), loads entry points (a plugin that fails to import becomes a warning
naming it), checks hook names with ``check_pending()`` and collects the registration records.
"""
from __future__ import annotations

import dataclasses

from .records import FigureSpec, KindSpec, Table, TableSpec, UseSpec  # noqa: F401


# ---------------------------------------------------------------- manager
ENTRY_POINT_GROUP = "plan.plugins"


def get_plugin_manager(blocked: tuple[str, ...] = (), extra: tuple = ()):
    """Create a pluggy manager with the hookspecs, entry-point plugins and ``extra`` modules.

    :param blocked: entry-point names not to load (like pytest's ``-p no:NAME``).
    :param extra: plugin objects to register in addition (tests, notebooks).
    :return: ``(pm, warnings)`` where warnings are strings about plugins that failed to load.
    """
    import pluggy
    from importlib.metadata import entry_points

    from . import hookspecs

    pm = pluggy.PluginManager("plan")
    pm.add_hookspecs(hookspecs)
    warnings: list[str] = []
    for name in blocked:
        pm.set_blocked(name)
    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    seen = set()
    for ep in eps:
        if ep.name in seen or pm.is_blocked(ep.name):
            continue
        seen.add(ep.name)
        try:
            obj = ep.load()
        except Exception as e:  # a broken third-party plugin must not break the tool
            warnings.append(f"plugin '{ep.name}' ({ep.value}) failed to load: {e}")
            continue
        if pm.get_plugin(ep.name) is None:
            pm.register(obj, name=ep.name)
    for obj in extra:
        name = getattr(obj, "__name__", None) or repr(obj)
        if pm.get_plugin(name) is None:
            pm.register(obj, name=name)
    pm.check_pending()
    return pm, warnings


class Plugins:
    """Typed facade over the hooks; the rest of the code never calls ``pm.hook`` directly."""

    def __init__(self, blocked: tuple[str, ...] = (), extra: tuple = ()):
        self.pm, self.warnings = get_plugin_manager(blocked, extra)
        self.blocks: dict[str, UseSpec] = {}
        self.kinds: dict[str, KindSpec] = {}
        self.conflicts: list[str] = []
        self.tables: dict[str, TableSpec] = {}
        self.figures: dict[str, FigureSpec] = {}
        self._register()

    def _results(self, hook_name: str):
        """(plugin name, result) pairs in a deterministic order (by plugin name)."""
        hook = getattr(self.pm.hook, hook_name)
        out = []
        for impl in hook.get_hookimpls():
            res = impl.function()
            if res:
                out.append((impl.plugin_name, res))
        return sorted(out, key=lambda p: p[0])

    def _register(self) -> None:
        from ..engine import units

        for _, defs in self._results("plan_units_register"):
            for d in defs:
                if len(d) == 3:
                    units.register_unit(d[0], d[1], dim_name=d[2])
                else:
                    units.register_unit(d[0], d[1], of=d[3])
        for pname, specs in self._results("plan_kinds_register"):
            for k in specs:
                prev = self.kinds.get(k.name)
                if prev is None:
                    self.kinds[k.name] = KindSpec(k.name, k.doc, k.fields, pname)
                else:  # several plugins read fields of one kind: the documented fields merge
                    have = {f.name for f in prev.fields}
                    self.kinds[k.name] = KindSpec(prev.name, prev.doc or k.doc,
                                                  prev.fields + tuple(f for f in k.fields if f.name not in have),
                                                  prev.plugin)
        for pname, specs in self._results("plan_blocks_register"):
            for s in specs:
                if s.name in self.blocks:
                    self.conflicts.append(
                        f"use block '{s.name}' is claimed by plugins '{self.blocks[s.name].plugin}' and '{pname}'")
                    continue
                self.blocks[s.name] = UseSpec(s.name, s.doc, s.params, s.plan_params, s.order, pname, s.provides,
                                              s.references)

        for kind, store, cls in (("plan_tables_register", self.tables, TableSpec),
                                 ("plan_figures_register", self.figures, FigureSpec)):
            for pname, specs in self._results(kind):
                for s in specs:
                    if s.name in store:
                        self.conflicts.append(f"{'table' if cls is TableSpec else 'figure'} '{s.name}' is "
                                              f"registered by plugins '{store[s.name].plugin}' and '{pname}'")
                        continue
                    store[s.name] = (dataclasses.replace(s, plugin=pname) if isinstance(s, cls) else
                                     cls(s.name, s.title, s.build if cls is TableSpec else s.draw, s.doc, pname,
                                         tuple(getattr(s, "references", ()))))

    def block_of(self, plugin: str | None) -> UseSpec | None:
        """The (first, by name) block a plugin registered, or None."""
        return next((s for _, s in sorted(self.blocks.items()) if s.plugin == plugin), None)

    @property
    def names(self) -> list[str]:
        return sorted(n for n, _ in self.pm.list_name_plugin())

    def config_import(self, kind: str, config: dict, path: str):
        return self.pm.hook.plan_config_import(kind=kind, config=config, path=path)

    def derive(self, ctx) -> None:
        self._call("plan_declaration_derive", ctx)

    def price(self, ctx) -> None:
        self._call("plan_quantities_price", ctx)

    def schedule(self, ctx) -> None:
        self._call("plan_activities_schedule", ctx)

    def _call(self, hook_name: str, ctx) -> None:
        """Call each implementation separately (sorted by plugin name) so a failure names
        its plugin and the others still run."""
        hook = getattr(self.pm.hook, hook_name)
        for impl in sorted(hook.get_hookimpls(), key=lambda i: i.plugin_name):
            ctx._current_plugin = impl.plugin_name
            try:
                impl.function(ctx)
            except ctx.Abort:
                pass
            except Exception as e:  # reported with the plugin's name, never a traceback
                ctx.plugin_failed(impl.plugin_name, e)
        ctx._current_plugin = None


_cache: dict[tuple, Plugins] = {}


def get_plugins(blocked: tuple[str, ...] = (), extra: tuple = ()) -> Plugins:
    """The (cached) facade for a given set of blocked/extra plugins."""
    key = (tuple(blocked), tuple(id(e) for e in extra))
    if key not in _cache:
        _cache[key] = Plugins(tuple(blocked), tuple(extra))
    return _cache[key]

