"""The graph: timelines' quantities and schedules, the dependency DiGraph, cycle checks.
"""
from __future__ import annotations



from ..engine.deferred import DeferredExpr, defer, deferred
from ..engine.timeline import FORM_LIMIT, FULL_LIMIT, MIRROR_LIMIT, Timeline
from ..engine.units import Dim
from ..plugin.context import PlanContext
from ..engine.nodes import Cycle, Node


def lex_topo(nodes, succ) -> list | None:
    """Topological order of the dependency graph, smallest id first among the ready ones
    (networkx's ``lexicographical_topological_sort``), or None on a cycle."""
    import heapq

    indeg = dict.fromkeys(nodes, 0)
    for u, vs in succ.items():
        indeg.setdefault(u, 0)
        for v in vs:
            indeg[v] = indeg.get(v, 0) + 1
    ready = [u for u, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for v in succ.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return out if len(out) == len(indeg) else None


def replay_graph(ops, order_edges):
    """The networkx DiGraph of the dependency graph, built by the same calls in the same order
    as the adjacency of ``_finalize`` (so node and edge order match)."""
    import networkx as nx

    g = nx.DiGraph()
    for nid, attrs, srcs in ops:
        if isinstance(attrs.get("expr"), DeferredExpr):     # a makespan not built yet: built now
            attrs = dict(attrs, expr=attrs["expr"].get())
        g.add_node(nid, **attrs)
        for x in srcs:
            g.add_edge(x, nid)
    for u, v in order_edges:
        g.add_edge(u, v, kind="order")
    return g


class GraphMixin:
    """Finalises the priced plans into a dependency graph with scheduled timelines."""

    def _timeline_quantities(self, tl: Timeline) -> None:
        """Check a timeline's structure and define its makespan and peak quantities.

        Small timelines get their exact max-plus makespan now (its path forms; the sympy
        expression is built on first read, :meth:`Timeline.full_expr_deferred`); larger ones a
        placeholder over the same inputs, replaced in :meth:`_schedule_timelines` by the
        symbolic length of the nominal critical path once the inputs have been range-checked.
        """
        import sympy as sp

        if tl.truncated and self.rep.errors:
            return      # the activity limit stopped a plugin (reported): checking a partial timeline is moot
        span = self.decls[tl.plan].ast.name_span
        try:
            tl.check_structure()
        except KeyError as e:
            other, who = e.args[0]
            slot = self.plugins.slot_of_timeline(tl.name)
            if slot is not None and other in slot.anchors:
                hint = (f"'{other}' is an anchor of the {slot.name.replace('_', ' ')} (timeline '{tl.name}'); "
                        "add a block that implements it: "
                        + ", ".join(f"`use {b}`" for b in slot.implementations if b in self.plugins.blocks))
            else:
                hint = "add the `use` block that schedules it"
            self.rep.error("missing-quantity", f"activity '{who}' of timeline '{tl.name}' (plugin "
                           f"'{tl.activities[who].plugin}') must be ordered against activity '{other}', which "
                           "no block in use schedules", span, hint)
            return
        bad = tl.unanchored()
        if bad is not None:
            h, anchor = bad
            self.rep.error("missing-quantity", f"memory hold '{h.id}' of timeline '{tl.name}' (plugin "
                           f"'{h.plugin}') is anchored to activity '{anchor[0]}', which is not "
                           "scheduled", span, "schedule the activity or anchor the hold elsewhere")
            return
        if tl.has_cycle():
            ids, preds = tl.edges()
            self.rep.error("cycle", f"timeline '{tl.name}' of '{tl.plan}' has a cycle: "
                           + " -> ".join(tl.find_cycle(ids, preds)), span,
                           "an activity waits, directly or through others, for itself; check the order of "
                           "work on each resource and the declared dependencies")
            return
        full = tl.symbolic == "full" or (tl.symbolic == "auto" and len(tl.activities) <= FULL_LIMIT)
        d = tl.full_expr_deferred(limit=10 ** 9 if tl.symbolic == "full" else FORM_LIMIT) if full else None
        if d is not None:
            defer(tl, "makespan_expr", d)
            total = sp.Dummy("makespan")    # stands in while the quantities are defined, then deferred
        elif tl.makespan_expr is not None:
            total = tl.makespan_expr
        else:   # placeholder over every duration (a lower bound), replaced after range checks
            sums = tl.resource_sums()
            total = (sp.Max(*sums, evaluate=False) if len(sums) > 1 else sums[0]) if sums else sp.Integer(0)
        for name, unit, doc, headline, plugin, rank in tl.makespans:
            ctx = PlanContext(self, tl.plan)
            ctx._current_plugin = plugin
            ctx.define(name, total, unit, doc, headline, rank=rank, references=tl.refs.get(name, ()))
            n = self.nodes.get(f"{tl.plan}.{name}")
            if d is not None and n is not None and n.__dict__.get("expr") is total:
                defer(n, "expr", d)
        for name, pool, unit, doc, headline, plugin, rank in tl.peaks:
            ctx = PlanContext(self, tl.plan)
            ctx._current_plugin = plugin
            ctx.define(name, tl.pool_total(pool), unit, doc, headline, rank=rank, references=tl.refs.get(name, ()))
        if tl.times or tl.areas:
            times = (tl.full_times(limit=10 ** 9 if tl.symbolic == "full" else FORM_LIMIT)
                     if d is not None or tl.makespan_expr is not None else None)
            if times is not None:
                ids, st, fin = times
                pos = {a: i for i, a in enumerate(ids)}
                start_of, finish_of = (lambda a: st[pos[a]]), (lambda a: fin[pos[a]])
            else:   # placeholders over the same inputs, replaced in _schedule_timelines
                start_of = finish_of = (lambda a: total)
            for name, act, at, unit, doc, headline, plugin, rank in tl.times:
                if act not in tl.activities:
                    self.rep.error("missing-quantity", f"quantity '{name}' of timeline '{tl.name}' (plugin "
                                   f"'{plugin}') is the {at} of activity '{act}', which is not scheduled", span,
                                   "schedule the activity first")
                    continue
                ctx = PlanContext(self, tl.plan)
                ctx._current_plugin = plugin
                ctx.define(name, start_of(act) if at == "start" else finish_of(act), unit, doc, headline, rank=rank,
                           references=tl.refs.get(name, ()))
            for name, pool, unit, doc, headline, plugin, rank in tl.areas:
                ctx = PlanContext(self, tl.plan)
                ctx._current_plugin = plugin
                end = tl.makespan_expr if d is not None else total     # an area needs the built makespan
                ctx.define(name, tl.area_expr(pool, start_of, finish_of, end), unit, doc, headline, rank=rank,
                           references=tl.refs.get(name, ()))
        if len(tl.activities) <= MIRROR_LIMIT:
            rows, edges = tl.mirror()
            tl.graph = {r[0]: [] for r in rows}     # activity -> successors
            for u, v in edges:
                tl.graph[u].append(v)
            dim, pre = Dim.of(time=1), f"{tl.plan}.{tl.name}."
            for aid, dur, res, plugin, doc in rows:
                nid = pre + aid
                self.nodes[nid] = Node(nid, "activity", tl.plan, aid, expr=dur, dim=dim, unit="s", plugin=plugin,
                                       doc=doc, state=2)
                self._activity_resource[nid] = res
            self._activity_edges.extend((pre + u, pre + v) for u, v in edges)

    def _schedule_timelines(self, g) -> None:
        """Nominal schedules and memory profiles of every timeline; makespans of large
        timelines become the symbolic length of their critical path, peaks the symbolic sum of
        the holds live at the peak instant.  Timelines are taken in the order of their
        quantities in the dependency graph, so one timeline may use another's makespan."""
        pos = {nid: i for i, nid in enumerate(g[2])}

        def first_pos(tl):
            names = ([m[0] for m in tl.makespans] + [p[0] for p in tl.peaks] + [t[0] for t in tl.times]
                     + [a[0] for a in tl.areas])
            return min((pos.get(f"{tl.plan}.{n}", len(pos)) for n in names), default=len(pos) + 1)

        class _NoValue(Exception):
            pass

        def num(e):
            v = self.subs_value(e)
            if v is None or not getattr(v, "is_number", False):
                raise _NoValue()
            return float(v)

        # a timeline whose durations read a computed quantity (a fitted efficiency) that waits for
        # other timelines is taken again once they are scheduled (its placeholder makespan has
        # no edges to tell the order beforehand)
        early = self.computed_early         # a range check read a computed quantity (it waited)
        todo = sorted(self.timelines, key=lambda k: (first_pos(self.timelines[k]), k))
        while todo:
            waiting = []
            for key in todo:
                self.computed_early = False
                if self._schedule_timeline(key, num, _NoValue):
                    waiting.append(key)
            if len(waiting) == len(todo):
                for key in waiting:
                    self.timelines[key].schedule = None
                    self.timelines_done.add(key)
                break
            todo = waiting
        if early:                   # the values that read it while it waited: read them again
            self.computed_early = False
            self._values.clear()
            self._full.clear()

    def _schedule_timeline(self, key, num, _NoValue) -> bool:
        """Schedule one timeline (see :meth:`_schedule_timelines`); True when it must wait for a
        computed quantity."""
        tl = self.timelines[key]
        if tl.graph is None and len(tl.activities) <= MIRROR_LIMIT and tl.activities:
            self.timelines_done.add(key)
            return False   # structural error already reported
        try:
            tl.schedule = tl.compute(num)
        except (_NoValue, ValueError, KeyError):
            if self.computed_early:
                self._values.clear()     # the values that read the waiting quantity
                self._full.clear()
                return True
            tl.schedule = None
            self.timelines_done.add(key)
            return False
        changed = False
        full_sym = deferred(tl, "makespan_expr") is not None or tl.makespan_expr is not None
        if not full_sym:
            tl.makespan_expr = tl.path_expr(tl.schedule)
            for name, *_ in tl.makespans:
                self.nodes[f"{tl.plan}.{name}"].expr = tl.makespan_expr
            changed = True
        if not full_sym and (tl.times or tl.areas):
            sc = tl.schedule
            start_of = (lambda a: tl.chain_expr(sc, a, "start"))
            finish_of = (lambda a: tl.chain_expr(sc, a, "finish"))
            for name, act, at, *_ in tl.times:
                self.nodes[f"{tl.plan}.{name}"].expr = start_of(act) if at == "start" else finish_of(act)
            for name, pool, *_ in tl.areas:
                self.nodes[f"{tl.plan}.{name}"].expr = tl.area_expr(pool, start_of, finish_of,
                                                                     tl.makespan_expr)
            changed = True
        for name, pool, *_ in tl.peaks:
            try:
                prof = tl.profiles[pool] = tl.profile(pool, num, tl.schedule)
            except _NoValue:
                continue
            self.nodes[f"{tl.plan}.{name}"].expr = tl.peak_expr(prof)
            changed = True
        for pool in tl.pools():
            if pool not in tl.profiles:
                try:
                    tl.profiles[pool] = tl.profile(pool, num, tl.schedule)
                except _NoValue:
                    pass
        self.timelines_done.add(key)
        if changed:
            self._values.clear()
            self._full.clear()
        return False

    # ------------------------------------------------------------ finalize
    @property
    def graph(self):
        """The dependency graph (networkx DiGraph), built on first use."""
        if self._graph is None and self._graph_ops is not None:
            ops, order, acts = self._graph_ops
            g = self._graph = replay_graph(ops, order)
            for nid, dur, res in acts:
                if nid in g:
                    g.nodes[nid]["duration"] = dur
                    g.nodes[nid]["resource"] = res
        return self._graph

    @graph.setter
    def graph(self, g) -> None:
        self._graph, self._graph_ops, self._adjacency = g, None, None

    def reachable(self, nid: str, up: bool = False) -> set:
        """Nodes reachable from ``nid`` along the dependency graph's edges (formula and order
        edges), ``nid`` excluded: its descendants, or with ``up`` its ancestors — networkx's
        ``descendants``/``ancestors`` of :attr:`graph`, without building the DiGraph."""
        if self._graph_ops is None:
            if self._graph is None or nid not in self._graph:
                return set()
            import networkx as nx
            return (nx.ancestors if up else nx.descendants)(self._graph, nid)
        adj = self._adjacency
        if adj is None:
            ops, order, _ = self._graph_ops
            succ: dict = {}
            pred: dict = {}
            for v, _, srcs in ops:
                succ.setdefault(v, set())
                pred.setdefault(v, set())
                for u in srcs:
                    succ.setdefault(u, set()).add(v)
                    pred.setdefault(v, set()).add(u)
            for u, v in order:
                succ.setdefault(u, set()).add(v)
                pred.setdefault(v, set()).add(u)
            adj = self._adjacency = (succ, pred)
        nbrs = adj[1] if up else adj[0]
        if nid not in nbrs:
            return set()
        seen: set = set()
        stack = [nid]
        while stack:
            for w in nbrs.get(stack.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        seen.discard(nid)
        return seen

    def _finalize(self, numeric: bool = True) -> None:
        """Build every field, check dimensions and references, build the dependency graph
        (reporting cycles) and, when ``numeric``, evaluate every node at nominal values."""
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            if n.kind == "field" and n.state == 0:
                try:
                    self.build(nid)
                except Cycle:
                    pass
        if self.rep.errors:
            return
        self._check_expectations()   # first: they point at the user's own fields
        self._check_specs()
        missing: dict[tuple, list[str]] = {}
        blocks = sorted(self.plugins.blocks.values(), key=lambda s: s.name)
        for nid, plugin in sorted(self.wanted.items()):
            if nid not in self.nodes:
                plan, q = nid.split(".", 1)
                # a block the plan uses that lists it but left it undefined (its condition unmet)
                # says why; otherwise the block that prices it
                used = next((s.name for s in blocks if q in s.provides and s.name in self.decls[plan].uses), None)
                provider = used or next((s.name for s in blocks if q in s.provides), None)
                why = self._provider_hint(q, plan) if used else None
                missing.setdefault((plan, plugin, provider, why), []).append(q)
        for (plan, plugin, provider, why), qs in missing.items():
            names = ", ".join(f"'{q}'" for q in qs)
            if why:
                self.rep.error("missing-quantity", f"`use {self.wanted_block(plugin)}` in plan '{plan}' needs "
                               f"{names}, which `use {provider}` does not define for this plan",
                               self.decls[plan].ast.name_span, why)
            elif provider:
                self.rep.error("missing-quantity", f"`use {self.wanted_block(plugin)}` in plan '{plan}' needs "
                               f"{names}, priced by `use {provider}`", self.decls[plan].ast.name_span,
                               f"add `use {provider} {{ … }}` to plan '{plan}'")
            else:
                self.rep.error("missing-quantity", f"plugin '{plugin}' needs {names} of plan '{plan}', which no "
                               "block in use defines", self.decls[plan].ast.name_span,
                               f"add the `use` block that prices it, or set `{qs[0]} = …` in the plan")
        if self.rep.errors:
            return
        # the dependency graph, first as plain adjacency (networkx is imported only when
        # ``ws.graph`` is read or a cycle has to be named): the same nodes, edges and order
        ops: list = []                      # replayed by replay_graph: (nid, attrs, sources)
        succ: dict = {}
        referenced: set = set()             # every name an expression reads (for _warn_unused)
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            srcs = ()
            d = deferred(n, "expr")         # a makespan's exact form, not built for evaluation
            expr = d if d is not None else n.expr
            if expr is not None:
                names = {s.name for s in expr.free_symbols}
                referenced |= names
                srcs = tuple(x for x in sorted(names) if x != nid)
                for x in srcs:
                    succ.setdefault(x, set()).add(nid)
            ops.append((nid, dict(kind=n.kind, expr=expr, unit=n.unit, plugin=n.plugin, doc=n.doc), srcs))
        for nid in sorted(set(succ) - set(self.nodes)):
            preds = sorted(succ[nid])
            self.rep.error("missing-quantity", f"'{nid}' is used by {', '.join(preds)} but never defined",
                           self.nodes[preds[0]].span, "a plugin refers to a quantity no block defines")
        if self.rep.errors:
            return
        if lex_topo(self.nodes, succ) is None:
            import networkx as nx

            cyc = nx.find_cycle(replay_graph(ops, ()))
            names = [e[0] for e in cyc] + [cyc[0][0]]
            related = tuple((f"'{c}' ({self.nodes[c].plugin or 'field'})", self.nodes[c].span)
                            for c in names[:-1] if self.nodes[c].span)
            first = next((self.nodes[c].span for c in names if self.nodes[c].span), None)
            self.rep.error("cycle", "cyclic definition: " + " -> ".join(names), first,
                           "a quantity depends on itself through these definitions", related=related)
            return
        # the step's activities live in the same graph: duration dependencies (above) plus
        # their order on the timeline (edges of kind "order", not formula dependencies)
        for u, v in self._activity_edges:
            succ.setdefault(u, set()).add(v)
        act_attrs = [(nid, self.nodes[nid].expr, res) for nid, res in self._activity_resource.items()]
        self._graph_ops = (ops, tuple(self._activity_edges), act_attrs)
        self._referenced = (len(self.nodes), referenced)
        self._graph, self._adjacency = None, None
        g = (self.nodes, succ, lex_topo(self.nodes, succ))     # with the order edges
        if not numeric:
            # `plan check`: literal parameters are still range-checked (no formula is evaluated)
            self.check_ranges(inputs_only=True)
            self._warn_unused()
            return
        if numeric:
            # out-of-range inputs (gpus = 0) are reported on their own text before they
            # cause a division by zero downstream
            self.check_ranges()
            if self.rep.errors:
                return
            self._schedule_timelines(g)
            for nid in g[2]:
                self.value(nid)
        self._warn_unused()
