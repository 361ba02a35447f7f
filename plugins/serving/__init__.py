"""Inference on engines' terms: the serving roofline (`serving`), engine memory (`serving_engine`),
the decode/prefill step (`serving_step`), the continuous-batching simulation (`serving_sim`),
request traces (`serving_trace`) and the SLO search over deployments (`serving_search`). Imports
`model`, `hardware` and `training`.
"""
