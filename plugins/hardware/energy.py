"""Energy, carbon and running cost of a plan, from its device's board power.

Every training plan and every serving plan on a device with a ``power`` field gets these
quantities (not headline); a plan with ``use energy { … }`` shows them as headlines and states
the facility around the GPUs:

======================  =========  ================================================================
quantity                unit       formula
======================  =========  ================================================================
power_per_gpu           W          (P_board · power_fraction + host_power) · pue
energy_per_step         kWh        step_time · gpus · power_per_gpu                   (training)
gpu_hours               h          the block's ``gpu_hours``, else gpus · finish_time (or
                                   train_time) of the plan                             (training)
energy                  MWh        gpu_hours · power_per_gpu                           (training)
energy_per_token        J/token    energy / workload tokens (training); power_per_gpu / the
                                   decode tokens per second of one GPU (serving)
carbon                  t          energy · carbon_intensity   (CO2-equivalent, location-based)
energy_cost             USD        energy · electricity_price
gpu_cost                USD        gpu_hours · gpu_hour_price
======================  =========  ================================================================

**Assumption.** ``P_board`` is the datasheet's thermal design power (TDP, or total board power
of a consumer card): the draw of a GPU under sustained load, an upper bound of the average.
The plan's MFU does not scale it — a GEMM-bound step runs near the power limit whatever its
MFU; ``power_fraction`` states a measured average instead.  This is the method of the published
figures the quantities are checked against: BLOOM's 433,196 kWh are its 1,082,990 A100 GPU-hours
at the 400 W TDP (Luccioni et al. 2022, table 1, dynamic consumption, no PUE), and the Llama 3
and 3.1 model cards state GPU-hours at "H100-80GB (TDP of 700W)".  ``pue`` (power usage
effectiveness: facility energy over IT energy, 1 = no cooling or conversion loss) and
``host_power`` (CPUs, memory, NICs per GPU) add what is outside the board; both default to
none, as in those figures.
"""
from __future__ import annotations

from dsl.plugin import Param, UseSpec, hookimpl

REFERENCES = (
    "Luccioni, Viguier and Ligozat 2022, 'Estimating the Carbon Footprint of BLOOM, a 176B Parameter "
    "Language Model' (JMLR 24, 2023): energy = GPU-hours × TDP; emissions = energy × grid carbon intensity",
    "Meta Llama 3 and Llama 3.1 model cards, 'Training Energy Use' and 'Training Greenhouse Gas Emissions': "
    "GPU-hours on H100-80GB at a TDP of 700 W, location-based tCO2eq",
    "The Green Grid, 'PUE: A Comprehensive Examination of the Metric' (2012): PUE = total facility energy / "
    "IT equipment energy",
)

ENERGY = UseSpec(
    "energy", "energy, carbon and electricity cost of the plan's GPUs from their board power",
    references=REFERENCES,
    params=(
        Param("pue", "", "1", "power usage effectiveness: facility energy over IT energy (1: none beyond the IT "
              "load)", min=1),
        Param("host_power", "W", "0 W", "power of the host around each GPU (CPUs, memory, NICs), per GPU", min=0),
        Param("power_fraction", "", "100 %", "average draw as a fraction of the device's board power (100 %: "
              "the TDP, an upper bound)", min=0, min_open=True, max=1),
        Param("gpu_hours", "h", doc="GPU-hours of the run as measured or published (default: gpus × finish_time "
              "of the plan's training step)", optional=True, min=0, min_open=True),
        Param("carbon_intensity", "g/kWh", doc="CO2-equivalent emitted per kWh drawn from the grid "
              "(location-based)", optional=True, min=0),
        Param("electricity_price", "USD/kWh", doc="price of one kWh", optional=True, min=0),
        Param("gpu_hour_price", "USD/h", doc="price of one GPU for one hour", optional=True, min=0),
    ),
    plan_params=(
        Param("device", kind="ref", ref_kind="device", doc="the accelerator, with a `power` field"),
        Param("gpus", "", doc="number of GPUs", optional=True, min=1),
    ),
    order=90,
    provides=("power_per_gpu", "energy_per_step", "gpu_hours", "energy", "energy_per_token", "carbon",
              "energy_cost", "gpu_cost"),
    provides_when=(("energy_per_step", "the plan has a training step (`use compute` or `use layout`)"),
                   ("carbon", "`carbon_intensity` is given"), ("energy_cost", "`electricity_price` is given"),
                   ("gpu_cost", "`gpu_hour_price` is given")),
)

# serving quantities that give one GPU's (one card's) decode tokens per second
_SERVING_RATES = ("decode_tokens_per_s", "card_decode_rate")


@hookimpl
def plan_blocks_register():
    return [ENERGY]


def _param(ctx, block, name, default):
    """A block parameter when the block is used, else its default (a number in base units)."""
    return block.q(name) if block is not None else default


@hookimpl
def plan_quantities_price(ctx):
    """Define the energy quantities of a plan on a device with a ``power`` field."""
    block = ctx.block("energy")
    training = ctx.provided("step_time")
    serving = next((r for r in _SERVING_RATES if ctx.provided(r)), None)
    if block is None and not (training or serving):
        return                                  # neither a training nor a serving plan: `device` not read
    if block is None and not ctx.stated("device"):
        return
    if block is None and not hasattr(ctx.value("device"), "name"):
        return                                  # `device` is not a declaration: nothing to read
    dev = ctx.ref("device")
    if not dev.has("power"):
        if block is not None:
            ctx.error(f"device '{dev.name}' states no `power`, which `use energy` needs", "add `power = … W` (its board power at load: the datasheet TDP) to the "
                      "device, or pick a catalog device that has one", code="missing-parameter")
        return
    head = block is not None
    refs = REFERENCES
    pw = ctx.define("power_per_gpu", (dev.q("power", "W", positive=True) * _param(ctx, block, "power_fraction", 1)
                                      + _param(ctx, block, "host_power", 0)) * _param(ctx, block, "pue", 1), "W",
                    "(board power · power_fraction + host_power) · PUE: the facility power one GPU draws",
                    headline=head, rank=40, references=refs)
    energy = None
    gpus = ctx.param("gpus") if ctx.stated("gpus") else None
    if training and gpus is not None:
        ctx.define("energy_per_step", ctx.q("step_time", "s") * gpus * pw, "kWh",
                   "step_time · gpus · power_per_gpu", headline=head, rank=41, references=refs)
    hours = None
    wl = _workload(ctx)
    tokens = wl is not None and wl.has("tokens")      # the training step's run length needs the workload's tokens
    if block is not None and block.given("gpu_hours"):
        hours = ctx.define("gpu_hours", block.q("gpu_hours"), "h", "GPU-hours of the run (stated)",
                           headline=head, rank=42, references=refs)
    elif gpus is not None and tokens and (ctx.provided("finish_time") or ctx.provided("train_time")):
        run = "finish_time" if ctx.provided("finish_time") else "train_time"
        hours = ctx.define("gpu_hours", gpus * ctx.q(run, "s"), "h", f"gpus · {run}: GPU time the run holds",
                           headline=head, rank=42, fallback=True, references=refs)
    if hours is not None:
        energy = ctx.define("energy", hours * pw, "MWh", "gpu_hours · power_per_gpu", headline=head, rank=43,
                            references=refs)
        if tokens:
            ctx.define("energy_per_token", energy / wl.q("tokens", "token", positive=True), "J/token",
                       "energy / the workload's tokens", headline=head, rank=44, references=refs)
    elif serving is not None:
        ctx.define("energy_per_token", pw / ctx.q(serving, "token/s"), "J/token",
                   f"power_per_gpu / {serving}: one GPU's energy per decoded token", headline=head, rank=44,
                   references=refs)
    if block is None:
        return
    if energy is not None and block.given("carbon_intensity"):
        ctx.define("carbon", energy * block.q("carbon_intensity"), "t",
                   "energy · carbon_intensity: operational CO2-equivalent emissions (location-based)",
                   headline=True, rank=45, references=refs)
    if energy is not None and block.given("electricity_price"):
        ctx.define("energy_cost", energy * block.q("electricity_price"), "USD", "energy · electricity_price",
                   headline=True, rank=46, references=refs)
    if hours is not None and block.given("gpu_hour_price"):
        ctx.define("gpu_cost", hours * block.q("gpu_hour_price"), "USD", "gpu_hours · gpu_hour_price",
                   headline=True, rank=47, references=refs)
    for name in ("carbon_intensity", "electricity_price", "gpu_hour_price"):
        if block.given(name) and energy is None and (name != "gpu_hour_price" or hours is None):
            block.warn_at(name, f"`{name}` has no run to price: the plan has no GPU-hours",
                          "give `gpu_hours`, or a training step with `use finish` (its finish time)",
                          code="incomplete")


def _workload(ctx):
    """The plan's workload, or None when it states none."""
    if not ctx.stated("workload") or not hasattr(ctx.value("workload"), "name"):
        return None
    return ctx.ref("workload")
