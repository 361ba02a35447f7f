"""Registration records plugins return: blocks, parameters, declaration kinds, tables, figures.

All are frozen dataclasses; the manager fills ``plugin`` with the registering plugin's name.
"""
from __future__ import annotations

from dataclasses import dataclass


# ---------------------------------------------------------------- records
@dataclass(frozen=True)
class Param:
    """A parameter of a ``use`` block or a plan-level parameter a plugin reads.

    :param name: the field name in the ``.plan`` file.
    :param unit: expected dimension written as a unit expression (``"s"``, ``"GB/s"``;
        ``""`` for dimensionless); for ``kind="quantity"`` only.
    :param default: default as `.plan` expression text evaluated in the block's scope
        (``"0 s"``, ``"gpus"``, ``"device.memory"``); ``None`` means required.
    :param kind: ``quantity`` (symbolic number), ``int`` (structural integer fixed at its
        nominal value), ``choice`` (string among ``choices``), ``ref`` (a declaration of
        kind ``ref_kind``) or ``bool``.
    :param min, max: allowed range of the nominal value, in ``unit``; ``min_open`` makes
        the lower bound exclusive.
    :param whole: a symbolic quantity whose value must be a whole number (a GPU count);
        unlike ``kind="int"`` it can still be solved for.
    :param kind: also ``list`` (``[a, b, c]``; items are numbers in ``unit`` or, with
        ``item="string"``, strings, or with ``item="ref"`` declarations of ``ref_kind``; at least
        ``min_items``), ``string`` (any text in double
        quotes) and ``file`` (a path relative to the ``.plan`` file that names it; the file
        must exist — read it with ``BlockView.path``).
    """

    name: str
    unit: str = ""
    default: str | None = None
    doc: str = ""
    kind: str = "quantity"
    choices: tuple[str, ...] = ()
    ref_kind: str | None = None
    min: float | None = None
    max: float | None = None
    min_open: bool = False
    optional: bool = False
    whole: bool = False
    item: str = "quantity"
    min_items: int | None = None


@dataclass(frozen=True)
class UseSpec:
    """A ``use NAME { … }`` block handled by a plugin.

    ``params`` are the block's own parameters; ``plan_params`` the plan-level fields the
    block reads (shared by every block that declares them; their units must agree).
    ``provides`` names the plan quantities the block defines (for documentation and for
    hints such as "'finish_time' is priced by `use finish`").  ``provides_when`` pairs a
    provided quantity the block defines only under a condition with that condition in words
    naming the field that enables it (``("train_time", "the workload has `tokens`")``): the hint
    for a plan, or another block, that reads it without meeting the condition.
    ``order`` positions the block's quantities in reports.  ``plugin`` is filled in by the
    facade with the registering plugin's name.
    """

    name: str
    doc: str
    params: tuple[Param, ...] = ()
    plan_params: tuple[Param, ...] = ()
    order: int = 100
    plugin: str = ""
    provides: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    provides_when: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class KindSpec:
    """A declaration kind (``model``, ``device`` …) and the fields plugins read from it.

    Fields of a declaration that no plugin documents for its kind get an ``unknown-field``
    warning with a did-you-mean (typos would otherwise be ignored silently).  Several
    plugins may register the same kind; their fields merge.
    """

    name: str
    doc: str
    fields: tuple[Param, ...] = ()
    plugin: str = ""
    references: tuple[str, ...] = ()
    #: the fields describe a fixed artefact (a model's architecture), not a choice a user tunes
    #: to meet a requirement: reports show no break-even rows for them (``plan solve`` still
    #: answers for them on request)
    fixed: bool = False


@dataclass(frozen=True)
class Table:
    """A table a plugin computes for one plan (shown by ``plan eval`` and reports).

    ``rows`` hold display strings or numbers; ``notes`` are sentences printed under it;
    ``references`` cite where this plan's rows come from (e.g. the ``source`` column of a
    user's log), shown with the spec's own references by ``plan eval --sources`` and
    ``plan report``, never by default.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    notes: tuple[str, ...] = ()
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableSpec:
    """A table a plugin can build: ``build(ev, plan) -> Table | None`` (``ev``: the read-only
    evaluation; None: not applicable to this plan).  ``name`` is a stable id (``memory-formats``), ``title`` a heading.

    How ``plan eval`` shows it (``--tables default|all|none``):

    * ``per_plan`` — False for a table whose content is mostly shared by the plans of a file
      (a format catalogue, a ranking of the file's plans): text output prints it once per
      distinct content, titled with the plans it stands for, instead of once per plan.
    * ``default`` — False for a table shown only on request (``--tables all``).
    * ``hidden_with`` — headline quantities that mark another question: for a plan whose
      headline includes one of them (e.g. ``finish_time`` for a format comparison) the table
      is shown only on request.

    JSON output lists every table of every plan whatever these say.
    """

    name: str
    title: str
    build: object
    doc: str = ""
    plugin: str = ""
    references: tuple[str, ...] = ()
    per_plan: bool = True
    default: bool = True
    hidden_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class FigureSpec:
    """A figure a plugin can draw: ``draw(ev, plan, fig) -> bool`` fills a matplotlib
    ``Figure`` and returns False when the plan has nothing to show.  ``name`` is a stable id
    used in file names (``PLAN-NAME.svg``)."""

    name: str
    title: str
    draw: object
    doc: str = ""
    plugin: str = ""
    references: tuple[str, ...] = ()




@dataclass(frozen=True)
class QuantitySpec:
    """A standard name of the plan vocabulary, declared once for every plugin.

    :param name: the field or quantity name (``gpus``, ``step_time``).
    :param unit: its unit expression (``"s"``, ``"GiB"``; ``""`` for a plain number).
    :param role: ``"parameter"`` — a plan-level input many blocks read (``model``, ``gpus``,
        ``mfu``); ``"quantity"`` — a result some block prices and others read (``step_time``,
        ``memory_per_gpu``); ``"requirement"`` — a standard requirement name (``fits_memory``).
    :param concern: the slot (:class:`SlotSpec`) the name belongs to, if any.
    :param kind, ref_kind: for parameters, as in :class:`Param` (``ref`` to a ``model`` …).

    A plugin that uses a vocabulary name with another unit (a ``plan_params`` entry, a
    ``ctx.define``) is an error naming both plugins.
    """

    name: str
    unit: str = ""
    doc: str = ""
    role: str = "quantity"
    concern: str = ""
    kind: str = "quantity"
    ref_kind: str | None = None
    plugin: str = ""


@dataclass(frozen=True)
class SlotSpec:
    """A concern with standard quantity names and a timeline other plugins hook into.

    :param name: the concern (``training_step``).
    :param quantities: vocabulary names the implementations publish (``step_time`` …).
    :param timeline: the plan timeline of the concern (``step``), if any.
    :param anchors: activities of that timeline other plugins may order against (``compute``,
        ``input_wait``); a plugin ordering against an anchor no block schedules gets an error
        naming the blocks that implement the slot.
    :param critical_path_of: the quantity whose timeline critical path ``plan eval`` shows
        (when a plugin, not the plan, defines it).
    :param implementations: ``use`` blocks that implement the slot (for hints).
    """

    name: str
    doc: str = ""
    quantities: tuple[str, ...] = ()
    timeline: str = ""
    anchors: tuple[str, ...] = ()
    critical_path_of: str = ""
    implementations: tuple[str, ...] = ()
    plugin: str = ""


@dataclass(frozen=True)
class CommandSpec:
    """A ``plan`` subcommand contributed by a plugin.

    :param name: the subcommand (``search``).
    :param help: one line for ``plan --help``; ``description`` the command's own help.
    :param add_arguments: ``add_arguments(parser)`` adds argparse arguments.
    :param run: ``run(args) -> int`` executes the command and returns the exit code (0 ok,
        1 a problem in the plan, 2 usage); it loads files with :func:`dsl.api.load` and may raise
        :class:`dsl.syntax.diagnostics.PlanError` (rendered by the CLI).
    """

    name: str
    help: str
    add_arguments: object
    run: object
    description: str = ""
    plugin: str = ""
