"""Weights as stored: bytes of a checkpoint whose linear layers are quantized.

A quantized linear layer of `fan_out` x `fan_in` weights stores, per matrix, its
values at their own width plus scales (and zero points) per group or block, so the
bytes follow each matrix's shape, not the parameter total. The model's tensors are
listed matrix by matrix (each layer kind in kvcalc.layers gives its own) and each is
stored as its checkpoint format does. Everything else (embeddings, lm_head, norms,
biases, routers, convolutions, excluded modules) stays in the model's own dtype.

One question per module:

- `formats`: what a checkpoint's `quantization_config` (or `--weight-dtype`) means:
  a `Quantization`, and which modules it converts
- `inventory`: the model's tensors, matrix by matrix, under checkpoint module names
- `stored`: the tensors one converted matrix stores, and bytes per element
- `weights`: the tally: `weight_bytes`, `weight_bytes_per_device`, `quantization_of`
"""
