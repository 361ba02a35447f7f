"""Hook specifications of `plan` (pluggy project name ``plan``).

Every built-in plugin in ``plugins/`` implements these hooks and is registered through the
``plan.plugins`` entry-point group exactly like a third-party plugin.  Hooks are called
through :class:`dsl.plugin.manager.Plugins`; nothing else touches ``pm.hook``.

Phases, in the order the core calls them:

1. registration — ``plan_units_register``, ``plan_kinds_register``, ``plan_blocks_register``;
2. declarations — ``plan_config_import`` (``model NAME from "config.json"``),
   ``plan_declaration_derive`` (derived fields such as a model's parameter count);
3. plans — ``plan_quantities_price`` (quantity nodes and requirements), then
   ``plan_activities_schedule`` (activities on timelines, whose makespans become quantities).
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("plan")
hookimpl = pluggy.HookimplMarker("plan")


# ---------------------------------------------------------------- registration
@hookspec
def plan_units_register() -> list[tuple]:
    """Register extra units.

    :return: a list of ``(name, scale, dim_name)`` tuples creating counted nouns (scale 1,
        new dimension ``dim_name``) or ``(name, scale, None, of_unit)`` defining ``name`` as
        ``scale`` × an existing unit expression.  All results are collected.
    """


@hookspec
def plan_vocabulary_register() -> list:
    """Declare standard names shared by many plugins, and the concerns (slots) they belong to.

    :return: a list of :class:`dsl.plugin.QuantitySpec` (plan-level parameters such as
        ``gpus``, ``mfu``; standard quantities such as ``step_time``, ``memory_per_gpu``;
        requirement names such as ``fits_memory``, each with its unit) and
        :class:`dsl.plugin.SlotSpec` (a concern's quantities, timeline and the anchors other
        plugins order against).  All results are collected; a name declared twice with
        different units, or used by a block's ``plan_params`` or a ``ctx.define`` in another
        unit, is an error naming both plugins.
    """


@hookspec
def plan_commands_register() -> list:
    """Contribute ``plan`` subcommands (``plan search`` …).

    :return: a list of :class:`dsl.plugin.CommandSpec`.  All results are collected; two
        plugins claiming one command name is an error naming both, and a plugin command
        cannot replace a core command.
    """


@hookspec
def plan_kinds_register() -> list:
    """Declare declaration kinds (``model``, ``device`` …) this plugin understands.

    :return: a list of :class:`dsl.plugin.KindSpec`.  All results are collected; a kind
        declared twice keeps the first documentation and merges nothing else.
    """


@hookspec
def plan_blocks_register() -> list:
    """Declare the ``use NAME { … }`` blocks this plugin handles.

    :return: a list of :class:`dsl.plugin.UseSpec` (name, parameters with units, defaults,
        ranges, and the plan-level parameters the block reads).  Two plugins claiming one
        block name is an error naming both.
    """


# ---------------------------------------------------------------- declarations
@hookspec(firstresult=True)
def plan_config_import(kind: str, config: dict, path: str):
    """Map an external config (``KIND NAME from "file.json"``) to declaration fields.

    :param kind: the declaration kind, e.g. ``"model"``.
    :param config: the parsed JSON document.
    :param path: the file it was read from (for messages).
    :return: ``dict[field, (value, unit)]`` with values as exact strings or bools, or
        ``None`` when this plugin does not understand the config.  ``firstresult``: the
        first plugin returning non-``None`` wins.  An entry ``"__warnings__": (messages, None)``
        is no field: each message becomes a ``warning[config]`` at the ``from`` line.  Raise
        ``ValueError`` (message naming the file) for a config that cannot be described: it
        becomes an ``error[bad-config]`` confined to that declaration; give it a ``key``
        attribute (the config key it is about) and the error also points at that key in the
        file, where the key is written once.
    """


@hookspec
def plan_declaration_derive(ctx) -> None:
    """Add derived fields to a declaration (e.g. a model's parameter count).

    :param ctx: :class:`dsl.plugin.DeclContext` of one declaration; use ``ctx.kind``,
        ``ctx.has``, ``ctx.field`` and ``ctx.define``.  Called for every non-plan
        declaration; return nothing.
    """


# ---------------------------------------------------------------- plans
@hookspec
def plan_quantities_price(ctx) -> None:
    """Add the quantities (and requirements) of the blocks this plugin handles.

    :param ctx: :class:`dsl.plugin.PlanContext`; ``ctx.block(NAME)`` is ``None`` when the
        plan has no ``use NAME`` block.  Quantities of other plugins are referenced with
        ``ctx.q(name, unit)`` and resolved after every plugin ran, so the order of plugins
        does not matter.  Return nothing.
    """


@hookspec
def plan_activities_schedule(ctx) -> None:
    """Add activities to the plan's timelines (``ctx.timeline(NAME)``).

    Called after every ``plan_quantities_price``.  Activities reference each other by name
    (``after=`` / ``before=``); names are resolved when the timeline's makespan is built.
    """


# ---------------------------------------------------------------- presentation
@hookspec
def plan_tables_register() -> list:
    """Declare tables this plugin can compute for a plan (``plan eval``, reports).

    :return: a list of :class:`dsl.plugin.TableSpec` whose ``build(ev, plan)`` returns a
        :class:`dsl.plugin.Table` or ``None`` when the plan has nothing to show.  Builders
        read nominal values through the read-only evaluation ``ev`` (``ev.value``, ``ev.uses`` …);
        they cannot change it.
    """


@hookspec
def plan_figures_register() -> list:
    """Declare figures this plugin can draw for a plan (``plan figure``, reports).

    :return: a list of :class:`dsl.plugin.FigureSpec` whose ``draw(ev, plan, fig)`` fills a
        matplotlib ``Figure`` and returns ``False`` when the plan has nothing to show.
        matplotlib is imported by the core only when a figure is requested.
    """
