"""Units and dimensions of the `.plan` language.

Every number in a plan carries a unit.  Internally a quantity is a sympy expression
holding its magnitude in *base units* plus a :class:`Dim` (a vector of exponents over
the base dimensions).  The base units are:

=========  ===========  ==============================================================
dimension  base unit    notes
=========  ===========  ==============================================================
time       ``s``        ns, us, ms, s, min, h, day, week
info       ``B``        bytes with decimal (kB MB GB TB PB) and binary (KiB MiB GiB TiB
                        PiB) prefixes; bits (bit kbit Mbit Gbit Tbit) = 1/8 B
flop       ``FLOP``     FLOP with k M G T P E prefixes
token      ``token``    counted nouns: token, seq, sample, request, param; ktoken, Mtoken =
                        10^3, 10^6 tokens (prices per million tokens: USD/Mtoken)
money      ``USD`` …    currencies, each its own dimension (USD, EUR, GBP, CNY, JPY; k and
                        M multiples): adding dollars to euros is an error, convert with a rate
energy     ``J``        J, kJ, MJ, GJ; Wh, kWh, MWh, GWh (3600 J per Wh); power W, kW, MW = J/s
mass       ``kg``       g, kg, t (the tonne, 1000 kg), kt, Mt: emitted CO2-equivalent mass, so a
                        grid's carbon intensity is ``g/kWh`` and a run's emissions ``t``
=========  ===========  ==============================================================

Time also has ``year`` (the Julian year, 365.25 days).

``%`` is the dimensionless 1/100.  Decimal and binary prefixes are distinct units of the
same dimension (1 GB = 10^9 B, 1 GiB = 2^30 B); 1 Gbit/s = 0.125 GB/s.

A unit expression is written without spaces directly after a number: ``32 GB/s``,
``165.2 TFLOP/s``, ``16 B/param``, ``1 GiB*s``, ``2 s^-1``.  The first atom is the
numerator; an atom after ``/`` divides, after ``*`` (or ``·``) multiplies.

Plugins may register further counted nouns through the ``plan_units_register`` hook.  The
core table is immutable; a plugin manager builds its own :class:`UnitTable` (core + its
plugins' units), which :func:`activate` makes current for parsing (a context variable, so
two evaluations with different plugins do not see each other's units).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from contextvars import ContextVar
from functools import lru_cache
from types import MappingProxyType

CURRENCIES: tuple[str, ...] = ("USD", "EUR", "GBP", "CNY", "JPY")
BASE_DIMS: tuple[str, ...] = ("time", "info", "flop", "token", "seq", "sample", "request", "param",
                              "energy", "mass") + CURRENCIES
_CORE_BASE_UNIT_OF = MappingProxyType({
    "time": "s", "info": "B", "flop": "FLOP", "token": "token", "seq": "seq",
    "sample": "sample", "request": "request", "param": "param", "energy": "J", "mass": "kg",
    **{c: c for c in CURRENCIES},
})


class UnitError(ValueError):
    """An unknown unit or an operation on incompatible dimensions.

    ``hint`` is a sentence telling the user how to fix it (may be empty).
    """

    def __init__(self, message: str, hint: str = "", code: str = "unit-mismatch"):
        super().__init__(message)
        self.hint = hint
        self.code = code


@dataclass(frozen=True)
class Dim:
    """A dimension: exponents over base dimensions, stored as a sorted tuple of pairs."""

    exps: tuple[tuple[str, Fraction], ...] = ()

    @staticmethod
    def of(**exps: int) -> "Dim":
        return Dim(tuple(sorted((k, Fraction(v)) for k, v in exps.items() if v)))

    def as_dict(self) -> dict[str, Fraction]:
        return dict(self.exps)

    def __mul__(self, other: "Dim") -> "Dim":
        d = self.as_dict()
        for k, v in other.exps:
            d[k] = d.get(k, Fraction(0)) + v
        return Dim(tuple(sorted((k, v) for k, v in d.items() if v)))

    def __truediv__(self, other: "Dim") -> "Dim":
        return self * other ** -1

    def __pow__(self, p) -> "Dim":
        p = Fraction(p)
        return Dim(tuple((k, v * p) for k, v in self.exps if v * p))

    @property
    def dimensionless(self) -> bool:
        return not self.exps

    def __str__(self) -> str:
        return format_dim(self)


DIMENSIONLESS = Dim()


def describe_dim(dim: Dim) -> str:
    """A dimension for messages: ``B/s``, or ``a plain number`` when dimensionless."""
    return "a plain number" if dim.dimensionless else format_dim(dim)


def format_dim(dim: Dim) -> str:
    """Render a dimension in base units, e.g. ``B/s`` or ``1`` for dimensionless."""
    if dim.dimensionless:
        return "1"
    num, den = [], []
    for k, v in dim.exps:
        name = _active.get().base_unit_of.get(k, k)
        target = num if v > 0 else den
        a = abs(v)
        target.append(name if a == 1 else f"{name}^{a}")
    s = "*".join(num) if num else "1"
    if den:
        s += "/" + "/".join(den)
    return s


@dataclass(frozen=True)
class Unit:
    """A named unit: ``scale`` base units per one of it (exact), and its dimension."""

    name: str
    scale: Fraction
    dim: Dim


def _build_table() -> dict[str, Unit]:
    t: dict[str, Unit] = {}

    def add(name: str, scale, dim: Dim) -> None:
        t[name] = Unit(name, Fraction(scale), dim)

    T, I, F = Dim.of(time=1), Dim.of(info=1), Dim.of(flop=1)
    for name, sc in {"ns": Fraction(1, 10**9), "us": Fraction(1, 10**6), "µs": Fraction(1, 10**6),
                     "ms": Fraction(1, 1000), "s": 1, "min": 60, "h": 3600, "day": 86400,
                     "week": 7 * 86400, "year": Fraction(36525 * 864)}.items():
        add(name, sc, T)
    dec = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    binp = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
    for p, sc in dec.items():
        add(p + "B", sc, I)
        add(p + "bit", Fraction(sc, 8), I)
        add(p + "FLOP", sc, F)
    for p, sc in binp.items():
        add(p + "B", sc, I)
        add(p + "bit", Fraction(sc, 8), I)
    for noun in ("token", "seq", "sample", "request", "param"):
        add(noun, 1, Dim.of(**{noun: 1}))
    add("ktoken", 10**3, Dim.of(token=1))
    add("Mtoken", 10**6, Dim.of(token=1))
    add("%", Fraction(1, 100), DIMENSIONLESS)
    for c in CURRENCIES:
        add(c, 1, Dim.of(**{c: 1}))
        add("k" + c, 10**3, Dim.of(**{c: 1}))
        add("M" + c, 10**6, Dim.of(**{c: 1}))
    E, P = Dim.of(energy=1), Dim.of(energy=1, time=-1)
    for p, sc in {"": 1, "k": 10**3, "M": 10**6, "G": 10**9}.items():
        add(p + "J", sc, E)
        add(p + "Wh", 3600 * sc, E)
        add(p + "W", sc, P)
    M = Dim.of(mass=1)
    for name, sc in {"g": Fraction(1, 1000), "kg": 1, "t": 1000, "kt": 10**6, "Mt": 10**9}.items():
        add(name, sc, M)
    return t


@dataclass(frozen=True, eq=False)
class UnitTable:
    """An immutable table of units: name -> :class:`Unit`, and the base unit of each
    dimension (for display).  Compared and hashed by identity (parse results are cached per
    table)."""

    units: MappingProxyType
    base_unit_of: MappingProxyType

    def extended(self, defs) -> "UnitTable":
        """A new table with ``defs`` added: ``(name, scale, dim_name)`` creates a counted noun
        (a new dimension), ``(name, scale, None, of_unit)`` defines ``name`` as ``scale`` ×
        an existing unit expression (the ``plan_units_register`` records)."""
        units, base = dict(self.units), dict(self.base_unit_of)
        for d in defs:
            if len(d) == 3 or d[3] is None:
                dn = d[2] or d[0]
                base.setdefault(dn, d[0])
                units[d[0]] = Unit(d[0], Fraction(d[1]), Dim.of(**{dn: 1}))
            else:
                of = _parse(d[3], UnitTable(MappingProxyType(units), MappingProxyType(base)))
                units[d[0]] = Unit(d[0], Fraction(d[1]) * of.scale, of.dim)
        return UnitTable(MappingProxyType(units), MappingProxyType(base))


CORE_UNITS = UnitTable(MappingProxyType(_build_table()), _CORE_BASE_UNIT_OF)
_active: ContextVar[UnitTable] = ContextVar("plan_units", default=CORE_UNITS)


def activate(table: UnitTable) -> None:
    """Make ``table`` the current unit table (of this thread / context)."""
    _active.set(table)


def active_units() -> UnitTable:
    """The current unit table (the core table unless a plugin manager's was activated)."""
    return _active.get()
_ALIASES: dict[str, str] = {
    "tokens": "token", "seqs": "seq", "samples": "sample", "requests": "request",
    "params": "param", "FLOPs": "FLOP", "sec": "s", "days": "day", "hours": "h",
}
_HINTS: dict[str, str] = {
    "KB": "write kB for 1000 bytes or KiB for 1024 bytes",
    "Kb": "write kbit for 1000 bits",
    "b": "write bit for bits or B for bytes",
    "Gb": "write Gbit for gigabits or GB for gigabytes",
    "Mb": "write Mbit for megabits or MB for megabytes",
    "Tb": "write Tbit for terabits or TB for terabytes",
    "d": "write day for days",
    "hr": "write h for hours",
    "TFLOPS": "write TFLOP/s for a rate",
    "Gbps": "write Gbit/s (gigabits per second) or GB/s (gigabytes per second)",
    "Mbps": "write Mbit/s", "Tbps": "write Tbit/s", "GBps": "write GB/s", "MBps": "write MB/s",
    "k": "a prefix needs a unit (kB, kFLOP); for a plain number write 1e3",
    "K": "a prefix needs a unit (kB, KiB); for a plain number write 1e3",
    "M": "a prefix needs a unit (MB, MFLOP); for a plain number write 1e6",
    "G": "a prefix needs a unit (GB, GFLOP); for a plain number write 1e9",
    "T": "a prefix needs a unit (TB, TFLOP); for a plain number write 1e12, e.g. 1e12 token",
    "P": "a prefix needs a unit (PB, PFLOP); for a plain number write 1e15",
    "Bn": "for a plain number write 1e9", "B_tokens": "write 1e9 token",
    "GFLOPS": "write GFLOP/s for a rate",
    "PFLOPS": "write PFLOP/s for a rate",
}


def known_units() -> list[str]:
    """Names of the units of the current table, sorted."""
    return sorted(_active.get().units)


_ATOM = re.compile(r"([/*·]?)([A-Za-zµ%][A-Za-z0-9_µ]*|%)(?:\^(-?\d+))?")


def parse_unit(text: str) -> Unit:
    """Parse a unit expression like ``GB/s`` into a :class:`Unit` (current unit table).

    :raises UnitError: for an unknown atom (with a did-you-mean hint) or bad syntax.
    """
    return _parse(text, _active.get())


@lru_cache(maxsize=4096)
def _parse(text: str, table: UnitTable) -> Unit:
    pos, scale, dim = 0, Fraction(1), DIMENSIONLESS
    first = True
    while pos < len(text):
        m = _ATOM.match(text, pos)
        if not m or (first and m.group(1)) or (not first and not m.group(1)):
            hint = "write units without spaces, e.g. GB/s or GiB*s"
            if text.startswith("1/") and pos == 0:
                hint = f"write a reciprocal unit with a power: {text[2:]}^-1"
            raise UnitError(f"malformed unit '{text}'", hint, "unknown-unit")
        op, name, power = m.group(1), m.group(2), m.group(3)
        name = _ALIASES.get(name, name)
        u = table.units.get(name)
        if u is None:
            raise UnitError(f"unknown unit '{name}'", unit_hint(name, table), "unknown-unit")
        if power and (len(power.lstrip("-").lstrip("0")) > 6 or abs(int(power)) > _unit_exponent_limit()):
            from dsl.syntax.limits import raise_hint
            raise UnitError(f"the exponent of '{name}' in '{_clip(text)}' is beyond the limit of "
                            f"{_unit_exponent_limit()} on unit exponents", raise_hint("unit_exponent"), "limit")
        p = int(power) if power else 1
        if op == "/":
            p = -p
        scale *= u.scale ** p
        dim = dim * (u.dim ** p)
        pos = m.end()
        first = False
    return Unit(text, scale, dim)


def _unit_exponent_limit() -> int:
    from dsl.syntax.limits import current
    return current().unit_exponent


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def unit_hint(name: str, table: UnitTable | None = None) -> str:
    """How to fix unknown unit ``name`` (a known confusion, or the nearest unit)."""
    if name in _HINTS:
        return _HINTS[name]
    from dsl.syntax.diagnostics import did_you_mean
    guess = did_you_mean(name, (table or _active.get()).units)
    return f"did you mean '{guess}'?" if guess else "see `docs/language.md` for the list of units"


# Units preferred when showing a value of a given dimension with no declared unit.
_PREFERRED = {
    Dim.of(time=1): "s", Dim.of(info=1): "GB", Dim.of(flop=1): "FLOP",
    Dim.of(info=1, time=-1): "GB/s", Dim.of(flop=1, time=-1): "TFLOP/s",
}


def default_unit_for(dim: Dim) -> str:
    """A readable unit for a dimension (base units when no preferred one exists)."""
    if dim in _PREFERRED:
        return _PREFERRED[dim]
    return "" if dim.dimensionless else format_dim(dim)


def convert(value_base: float, unit: str) -> float:
    """Convert a magnitude in base units to ``unit``."""
    if not unit or unit == "1":
        return value_base
    return value_base / float(parse_unit(unit).scale)


def count_noun(dim: Dim) -> str | None:
    """The base dimension of a count that carries a noun (``token``, ``seq``, ``request``,
    ``param``, ``FLOP``, a plugin's ``trajectory``): one base to the first power that is not
    time, information, energy, mass or money; else None.  Such a count can be shown as a plain number.

    >>> count_noun(Dim.of(token=1)), count_noun(Dim.of(time=1)), count_noun(Dim.of(token=1, time=-1))
    ('token', None, None)
    """
    if len(dim.exps) != 1:
        return None
    base, e = dim.exps[0]
    if e != 1 or base in ("time", "info", "energy", "mass") or base in CURRENCIES:
        return None
    return base


def check_unit_for(dim: Dim, unit: str) -> None:
    """Raise :class:`UnitError` unless ``unit`` measures ``dim`` (``1`` measures a plain number
    and a count that carries a noun: 384 seq shown ``--in 1`` is 384)."""
    if not unit or unit == "1":
        if count_noun(dim) is not None:
            return
        if not dim.dimensionless:
            raise UnitError(f"a value in {format_dim(dim)} cannot be shown as a plain number",
                            f"pick a unit of dimension {format_dim(dim)}")
        return
    u = parse_unit(unit)
    if u.dim != dim:
        raise UnitError(f"cannot express a value in {format_dim(dim)} as {unit} ({format_dim(u.dim)})",
                        f"pick a unit of dimension {format_dim(dim)}")


def format_number(x: float, sig: int = 4) -> str:
    """Format with ``sig`` significant digits, no exponent for ordinary magnitudes.

    Integers below 10^15 print exactly with thousands separators.
    """
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    ax = abs(x)
    if ax >= 1e15 or ax < 1e-4:
        return f"{x:.{sig - 1}e}"
    import math
    digits = max(0, sig - 1 - int(math.floor(math.log10(ax))))
    s = f"{x:,.{digits}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def format_quantity(value_base: float, unit: str, sig: int = 4) -> str:
    """Render ``value_base`` (base units) in ``unit`` for people: ``12.03 s``, ``40 %``."""
    v = convert(value_base, unit)
    num = format_number(v, sig)
    if not unit or unit == "1":
        return num
    return f"{num} {unit}" if unit != "%" else f"{num} %"
