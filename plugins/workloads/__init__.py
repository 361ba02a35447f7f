"""Workload kinds built on the layers below: RL loops (`rl`, `rl_colocate`, `rl_consistency`,
`rl_cycle`), agents, multimodal and audio serving, token budgets and scaling laws (`budgets`,
`scaling`). Top layer.
"""
