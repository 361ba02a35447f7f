"""Inference on engines' terms: the serving roofline (`serving`), engine memory (`serving_engine`),
the decode/prefill step (`serving_step`: the block; `serving_step_core`: the step cost model),
the continuous-batching simulation (`serving_sim`: `use batching`; `serving_sim_core`: the
simulator), request traces (`serving_trace`) and the SLO search over deployments
(`serving_search`: the block; `serving_search_core`: screen, simulation and choice), and
`plan launch`, a deployment as vLLM or SGLang command lines (`serving_launch`). Imports
`model`, `hardware` and `training`.
"""
