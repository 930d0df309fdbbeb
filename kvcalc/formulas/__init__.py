"""Pure integer math over a model's layer groups, one module per question.

- `cache`: what the KV cache (and constant layer state) holds, per TP device;
- `params`: parameter counts, matrix by matrix, and each TP device's share;
- `step`: one decode step's FLOPs and bytes moved, and a prompt's prefill FLOPs;
- `attention`: the bare decode-attention call kvcalc measure times, and Shazeer's
  memory-to-arithmetic ratio.

Every function takes plain values or a ModelSpec and returns Python ints (ratios
only where a ratio is the point). Units are bytes, elements and FLOPs, where one
multiply-add is 2 FLOPs. Nothing here formats, prints or imports torch.
"""
