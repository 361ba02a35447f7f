"""The model's architecture as plugins see it: a decoder's shape from a `model` declaration or a
Hugging Face config.json (`decoder`, `hf_config`), the one module of per-token FLOP formulas
(`flops`), and the bytes of its state — weights, KV cache, activations (`llmstate`). Bottom
layer: imports nothing else from plugins.
"""
