"""One training step and what shapes it: compute and memory (`compute`, `memory`, `buffers`,
`recompute`, `offload`, `zero`), the parallel layout and its roofline step model (`layout`,
`layout_model`, `layout_search`), pipeline schedules (`pipeline`, `pipeline_schedules`), overlap
of communication, MoE routing (`moe`), calibration against measured runs (`calibrate`) and the
generic timelines block (`timelines`). Imports `model`, `hardware` and `reliability`.
"""
