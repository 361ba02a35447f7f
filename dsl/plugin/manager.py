"""The plugin manager factory and the typed facade over the hooks.

Built-in plugins are ordinary modules registered through the ``plan.plugins`` entry-point
group, exactly like third-party ones.  :func:`get_plugin_manager` builds a pluggy manager (no
manager exists at import time), loads entry points (a plugin that fails to import becomes a
warning naming it; a blocked name is not loaded), checks hook names with ``check_pending()``.
:class:`Plugins` collects the registration records and is the only caller of hooks.

Every hook is called **through pluggy** (``pm.hook.NAME(...)``), so ``tryfirst``/``trylast``,
old-style ``hookwrapper=True`` and new-style ``wrapper=True`` implementations and
``firstresult`` behave as pluggy documents.  Plugins are registered in reverse name order,
so that (pluggy calling the last registered first) implementations without ordering marks run
in plugin-name order: output is deterministic.

Two things pluggy does not do are added around each plain (non-wrapper) implementation when
the manager is built: *attribution* — records a registration hook returns get the plugin's
name, and while a pricing hook runs the context knows which plugin is defining quantities
(for ``plan explain`` and for conflicts) — and *isolation* — an exception in one plugin's
pricing becomes a diagnostic naming the plugin and the plan, and the other plugins still run.
"""
from __future__ import annotations

import dataclasses

from .records import (CommandSpec, FigureSpec, KindSpec, QuantitySpec, SlotSpec, TableSpec,  # noqa: F401
                      UseSpec)

ENTRY_POINT_GROUP = "plan.plugins"

# hooks whose implementations receive a context (attributed and isolated per plugin)
_CONTEXT_HOOKS = ("plan_declaration_derive", "plan_quantities_price", "plan_activities_schedule")
# registration hooks whose records get the registering plugin's name, with the record types
# each may return
_REGISTRATION_HOOKS = {"plan_kinds_register": (KindSpec,), "plan_blocks_register": (UseSpec,),
                       "plan_tables_register": (TableSpec,), "plan_figures_register": (FigureSpec,),
                       "plan_vocabulary_register": (QuantitySpec, SlotSpec),
                       "plan_commands_register": (CommandSpec,), "plan_units_register": (tuple,)}


def _bad_record(rec, types) -> str | None:
    """Why a registration record cannot be used (None when it can)."""
    from .records import Param
    if not isinstance(rec, types):
        return f"a {type(rec).__name__} where {' or '.join(t.__name__ for t in types)} was expected"
    if isinstance(rec, UseSpec):
        for group in (rec.params, rec.plan_params):
            bad = next((p for p in group if not isinstance(p, Param)), None)
            if bad is not None:
                return f"`use {rec.name}` lists {bad!r} where a Param was expected"
    if isinstance(rec, KindSpec):
        bad = next((p for p in rec.fields if not isinstance(p, Param)), None)
        if bad is not None:
            return f"kind '{rec.name}' lists {bad!r} where a Param was expected"
    if isinstance(rec, tuple) and not (len(rec) in (3, 4) and isinstance(rec[0], str)):
        return f"unit {rec!r} is not (name, scale, dim_name) or (name, scale, None, of_unit)"
    return None


def _attributed(impl, warnings: list[str], hook: str) -> None:
    """Wrap one plain hook implementation for attribution and isolation (see the module
    docstring).  Wrappers (``hookwrapper``/``wrapper``) are left exactly as written.  A
    registration hook that raises, or returns records of the wrong type, is a warning naming
    the plugin (its records are skipped): a broken third-party plugin must not stop the tool."""
    if impl.hookwrapper or impl.wrapper:
        return
    fn, name = impl.function, impl.plugin_name
    argnames = impl.argnames

    if "ctx" in argnames:
        pos = argnames.index("ctx")

        def run(*args):
            ctx = args[pos]
            prev = ctx._current_plugin
            ctx._current_plugin = name
            from ..syntax.limits import time_budget
            try:
                with time_budget():   # a plugin that runs too long gives up (error[limit]) instead of hanging
                    return fn(*args)
            except ctx.Abort:
                return None
            except Exception as e:    # reported with the plugin's name, never a traceback
                ctx.plugin_failed(name, e)
                return None
            finally:
                ctx._current_plugin = prev
    else:
        types = _REGISTRATION_HOOKS.get(hook, (object,))

        def run(*args):
            try:
                res = fn(*args)
                res = list(res or ())
            except Exception as e:
                warnings.append(f"plugin '{name}': {hook} failed ({type(e).__name__}: {e}); its records are skipped")
                return None
            out = []
            for r in res:
                why = _bad_record(r, types)
                if why:
                    warnings.append(f"plugin '{name}': {hook} returned {why}; skipped")
                    continue
                out.append(dataclasses.replace(r, plugin=name) if dataclasses.is_dataclass(r)
                           and hasattr(r, "plugin") and not r.plugin else r)
            return out
    run.__wrapped__ = fn
    impl.function = run    # HookImpl keeps argnames; pluggy calls function(*args) in that order


_MANAGER_CLASS = None


def _manager_class():
    """``pluggy.PluginManager`` with a cheaper scan of module plugins (built once).

    pluggy's ``register`` asks ``parse_hookimpl_opts`` about every name of a plugin's
    namespace, and the default looks each one up with ``inspect.getattr_static`` (≈1,400
    names over the standard plugins, most of them imports and constants).  For a module, a
    name whose value is not a function, ``staticmethod``, ``classmethod`` or bound method, or
    is a plain function without the ``plan_impl`` marker, cannot be a hook implementation
    under pluggy's own rules, so it is skipped here without the lookup; every other name (and
    every plugin that is not a module) goes to pluggy's implementation unchanged."""
    global _MANAGER_CLASS
    if _MANAGER_CLASS is None:
        import types

        import pluggy

        hookable = (types.FunctionType, staticmethod, classmethod, types.MethodType)

        class _Manager(pluggy.PluginManager):
            def parse_hookimpl_opts(self, plugin, name):
                if isinstance(plugin, types.ModuleType):
                    v = plugin.__dict__.get(name)
                    if not isinstance(v, hookable) or (type(v) is types.FunctionType
                                                       and self.project_name + "_impl" not in v.__dict__):
                        return None
                return super().parse_hookimpl_opts(plugin, name)

        _MANAGER_CLASS = _Manager
    return _MANAGER_CLASS


def get_plugin_manager(blocked: tuple[str, ...] = (), extra: tuple = ()):
    """Create a pluggy manager with the hookspecs, entry-point plugins and ``extra`` objects.

    :param blocked: plugin names not to load (like pytest's ``-p no:NAME``); ``plan
        --disable-plugin NAME`` and ``PLAN_DISABLE_PLUGINS`` end up here.
    :param extra: plugin objects (modules, classes, instances) to register in addition
        (tests, notebooks); registered under their ``__name__`` unless blocked.
    :return: ``(pm, warnings)`` where warnings are strings about plugins that failed to load.
    """
    import pluggy
    from importlib.metadata import entry_points

    from . import hookspecs

    pm = _manager_class()("plan")
    pm.add_hookspecs(hookspecs)
    warnings: list[str] = []
    for name in blocked:
        pm.set_blocked(name)
    loaded: dict[str, object] = {}
    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    for ep in eps:
        if ep.name in loaded or pm.is_blocked(ep.name):
            continue
        try:
            loaded[ep.name] = ep.load()
        except Exception as e:  # a broken third-party plugin must not break the tool
            warnings.append(f"plugin '{ep.name}' ({ep.value}) failed to load: {e}")
    for obj in extra:
        name = getattr(obj, "__name__", None) or type(obj).__name__
        if any(o is obj for o in loaded.values()):     # already installed through its entry point
            continue
        if name not in loaded and not pm.is_blocked(name):
            loaded[name] = obj
    known = {ep.name for ep in eps} | set(loaded)
    for name in blocked:
        if name not in known:
            warnings.append(f"--disable-plugin {name}: no plugin of that name (plugins: "
                            + ", ".join(sorted(known)) + ")")
    for name in sorted(loaded, reverse=True):    # pluggy calls the last registered first
        try:
            pm.register(loaded[name], name=name)
        except Exception as e:   # a hook implementation whose arguments the spec does not have
            warnings.append(f"plugin '{name}' cannot be registered: {e}")
            pm.set_blocked(name)
    while True:
        try:
            pm.check_pending()
            break
        except pluggy.PluginValidationError as e:     # a misspelt hook name
            bad = getattr(e, "plugin", None)
            bad_name = pm.get_name(bad) if bad is not None else None
            warnings.append(f"plugin '{bad_name}' is not loaded: {e}")
            if bad_name is None:
                break
            pm.unregister(name=bad_name)
            pm.set_blocked(bad_name)
    for hook_name in _CONTEXT_HOOKS + tuple(_REGISTRATION_HOOKS):
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            _attributed(impl, warnings, hook_name)
    return pm, warnings


def _unit_dim(unit: str):
    from ..engine.units import UnitError, parse_unit
    try:
        return parse_unit(unit).dim if unit else None
    except UnitError:
        return "?"


class Plugins:
    """Typed facade over the hooks; the rest of the code never calls ``pm.hook`` directly.

    :ivar blocks: ``use`` block name -> :class:`UseSpec`.
    :ivar kinds: declaration kind -> :class:`KindSpec` (fields merged over plugins).
    :ivar vocabulary: standard name -> :class:`QuantitySpec`.
    :ivar slots: concern name -> :class:`SlotSpec`.
    :ivar tables, figures, commands: by name.
    :ivar units: the :class:`~dsl.engine.units.UnitTable` of the core and these plugins.
    :ivar conflicts: registration errors (two plugins claiming one name, a vocabulary name
        redeclared with another unit), each naming both plugins.
    """

    def __init__(self, blocked: tuple[str, ...] = (), extra: tuple = ()):
        self.pm, self.warnings = get_plugin_manager(blocked, extra)
        self.blocked = tuple(blocked)
        self.blocks: dict[str, UseSpec] = {}
        self.kinds: dict[str, KindSpec] = {}
        self.vocabulary: dict[str, QuantitySpec] = {}
        self.slots: dict[str, SlotSpec] = {}
        self.conflicts: list[str] = []
        self.tables: dict[str, TableSpec] = {}
        self.figures: dict[str, FigureSpec] = {}
        self.commands: dict[str, CommandSpec] = {}
        self._register()

    def _results(self, hook_name: str) -> list:
        """The records of a registration hook, in pluggy's call order, flattened."""
        out = []
        try:
            results = getattr(self.pm.hook, hook_name)()
        except Exception as e:    # a wrapper implementation that raised
            self.warnings.append(f"a wrapper of {hook_name} failed ({type(e).__name__}: {e}); its records are skipped")
            return out
        for res in results:
            out.extend(res or ())
        return out

    def _claim(self, store: dict, what: str, rec) -> bool:
        prev = store.get(rec.name)
        if prev is not None:
            self.conflicts.append(f"{what} '{rec.name}' is claimed by plugins '{prev.plugin}' and '{rec.plugin}'")
            return False
        store[rec.name] = rec
        return True

    def _register(self) -> None:
        from ..engine.units import CORE_UNITS

        self.units = CORE_UNITS.extended(self._results("plan_units_register"))
        for k in self._results("plan_kinds_register"):
            prev = self.kinds.get(k.name)
            if prev is None:
                self.kinds[k.name] = k
            else:  # several plugins read fields of one kind: the documented fields merge
                have = {f.name for f in prev.fields}
                self.kinds[k.name] = dataclasses.replace(
                    prev, doc=prev.doc or k.doc, fixed=prev.fixed or k.fixed, fields=prev.fields + tuple(f for f in k.fields if f.name not in have),
                    references=prev.references + tuple(r for r in k.references if r not in prev.references))
        for rec in self._results("plan_vocabulary_register"):
            if isinstance(rec, SlotSpec):
                self._claim(self.slots, "slot", rec)
            else:
                prev = self.vocabulary.get(rec.name)
                if prev is not None and _unit_dim(prev.unit) != _unit_dim(rec.unit):
                    self.conflicts.append(f"standard name '{rec.name}' is declared in {prev.unit or 'a plain number'} "
                                          f"by plugin '{prev.plugin}' and in {rec.unit or 'a plain number'} by "
                                          f"plugin '{rec.plugin}'")
                elif prev is None:
                    self.vocabulary[rec.name] = rec
        for s in self._results("plan_blocks_register"):
            if self._claim(self.blocks, "use block", s):
                self._check_vocabulary(s)
        for s in self._results("plan_tables_register"):
            self._claim(self.tables, "table", s)
        for s in self._results("plan_figures_register"):
            self._claim(self.figures, "figure", s)
        for s in self._results("plan_commands_register"):
            self._claim(self.commands, "command", s)
        self.blocks = dict(sorted(self.blocks.items()))

    def _check_vocabulary(self, spec: UseSpec) -> None:
        """A block's plan-level parameter that is a standard name must use its unit."""
        for p in spec.plan_params:
            v = self.vocabulary.get(p.name)
            if v is None or v.role != "parameter" or p.kind != "quantity" or v.kind != "quantity":
                continue
            if _unit_dim(p.unit) != _unit_dim(v.unit):
                self.conflicts.append(
                    f"plugin '{spec.plugin}' reads plan parameter '{p.name}' in {p.unit or 'a plain number'}, but "
                    f"plugin '{v.plugin}' declares the standard parameter in {v.unit or 'a plain number'}")

    def block_of(self, plugin: str | None) -> UseSpec | None:
        """The (first, by name) block a plugin registered, or None."""
        return next((s for _, s in sorted(self.blocks.items()) if s.plugin == plugin), None)

    def slot_of_timeline(self, timeline: str) -> SlotSpec | None:
        """The slot whose timeline is ``timeline`` (``step``), or None."""
        return next((s for _, s in sorted(self.slots.items()) if s.timeline == timeline), None)

    @property
    def names(self) -> list[str]:
        """Names of the registered plugins, sorted."""
        return sorted(n for n, p in self.pm.list_name_plugin() if p is not None)

    def config_import(self, kind: str, config: dict, path: str):
        """``plan_config_import`` (firstresult): the first plugin's mapping, or None."""
        return self.pm.hook.plan_config_import(kind=kind, config=config, path=path)

    def derive(self, ctx) -> None:
        """``plan_declaration_derive`` for one declaration context."""
        self._call("plan_declaration_derive", ctx)

    def price(self, ctx) -> None:
        """``plan_quantities_price`` for one plan context."""
        self._call("plan_quantities_price", ctx)

    def schedule(self, ctx) -> None:
        """``plan_activities_schedule`` for one plan context."""
        self._call("plan_activities_schedule", ctx)

    def _call(self, hook_name: str, ctx) -> None:
        """Call a context hook through pluggy; plain implementations are isolated by their
        wrappers (see :func:`_attributed`), so what still raises here is a hook wrapper."""
        try:
            getattr(self.pm.hook, hook_name)(ctx=ctx)
        except ctx.Abort:
            pass
        except Exception as e:
            ctx.plugin_failed(ctx._current_plugin or f"a wrapper of {hook_name}", e)


_cache: dict[tuple, Plugins] = {}


def get_plugins(blocked: tuple[str, ...] = (), extra: tuple = ()) -> Plugins:
    """The facade for a given set of blocked/extra plugins (built once per set: the
    registries it holds are not changed after construction)."""
    key = (tuple(sorted(blocked)), tuple(id(e) for e in extra))
    if key not in _cache:
        _cache[key] = Plugins(tuple(blocked), tuple(extra))
    return _cache[key]
