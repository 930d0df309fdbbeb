"""The options of `kvcalc measure`, in the order --help lists them: (parameter, Annotated
alias, default) rows that kvcalc.cli.parsing.with_options gives the command when it is
built."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.options import ForceOpt, FormatOpt, OutputOpt

HeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads",
    help="Query heads (count) (default: the preset's; required without --preset).")]
KvHeadsOpt = Annotated[Optional[int], typer.Option(
    "--kv-heads", help="K/V heads (count), dividing --heads: = heads MHA, 1 MQA, between GQA "
    "(default: the preset's, else --heads).")]
HeadDimOpt = Annotated[Optional[int], typer.Option(
    "--head-dim", help="Per-head width (elements) (default: the preset's, else 128).")]
SeqLenOpt = Annotated[Optional[str], typer.Option(
    "--seq-len", help="Cached tokens per sequence (32k = 32,000, 32K = 32,768, as vLLM "
    "reads them); with --sweep a SPEC (default: 8192 on a GPU, 2048 on a CPU).")]
BatchOpt = Annotated[Optional[str], typer.Option(
    "--batch", help="Sequences, one query token each; with --sweep a SPEC (default: the "
    "smallest power of two giving a >= 1 GB cache on a GPU, >= 64 MiB (at most 16) on a "
    "CPU).")]
SweepOpt = Annotated[bool, typer.Option(
    "--sweep", help="Measure every (--seq-len, --batch) pair, both given as SPECs: a value, "
    "a list (1,8,32), start:stop:+step or start:stop:*factor; ceilings measured once "
    "(default: off).")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", help="Also draw measured against predicted time and achieved bandwidth "
    "against cache size to this PNG (needs matplotlib: pip install 'kvcalc\\[plot]') "
    "(default: none).")]
DtypeOpt = Annotated[Optional[str], typer.Option(
    "--dtype", help="fp32, bf16 or fp16 for cache, queries and weights "
    "(default: bf16 on a GPU, fp32 on a CPU).")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="auto, cuda or cpu (default: auto = cuda when available).")]
ImplOpt = Annotated[str, typer.Option(
    "--impl", help="auto, all, or one or more (comma-separated) of grouped, sdpa, repeat, "
    "sdpa-flash, sdpa-efficient, sdpa-cudnn, sdpa-math (default: auto = time grouped, sdpa "
    "and, on CUDA when flash accepts the inputs, sdpa-flash; keep the fastest correct).")]
StepOpt = Annotated[Optional[str], typer.Option(
    "--step", help="attention (the attention call), layer (x -> qkv -> cache write -> "
    "attention -> output projection), both, model (a whole decode step of --preset, "
    "beside `estimate`'s time per output token on --gpu), or mixed (a served scheduler "
    "step of --preset or --config: --batch decode tokens at --seq-len and "
    "--prefill-tokens of a prompt in the same forward pass, beside the roofline of its "
    "bytes and FLOPs at ceilings measured in the run; --batch 1 and --seq-len 1024 on a "
    "GPU, 256 on a CPU unless given) (default: attention; mixed when --prefill-tokens "
    "is given).")]
PrefillTokensOpt = Annotated[Optional[str], typer.Option(
    "--prefill-tokens", help="With --step mixed: prompt tokens (a chunked-prefill "
    "chunk of one prompt) carried in the decode step's forward pass (count, >= 0; "
    "0 = the decode step alone) (default: 0).")]
PrefillStartOpt = Annotated[Optional[str], typer.Option(
    "--prefill-start", help="With --step mixed: the chunk's first position in its "
    "prompt, i.e. prompt tokens already cached that its causal attention also covers "
    "(tokens) (default: 0, the prompt's first chunk).")]
ConfigFileOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="With --step model or mixed: the model as a preset-format YAML or "
    "a Hugging Face config.json (local file), in place of --preset (default: none).")]
WarmupOpt = Annotated[Optional[int], typer.Option(
    "--warmup", help="Untimed calls before timing (count) (default: 10 GPU, 3 CPU).")]
ItersOpt = Annotated[Optional[int], typer.Option(
    "--iters", help="Timed repetitions (count); median and p10/p90 reported "
    "(default: 100 GPU, 20 CPU).")]
PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", help="Take heads, K/V heads, head_dim, d_model and layers from a model "
    "preset (see `kvcalc presets`); flags given override it (default: none).")]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", help="Model width for the layer step (elements) "
    "(default: the preset's, else heads x head_dim).")]
CompareOpt = Annotated[bool, typer.Option(
    "--compare", help="Also run MHA (kv_heads = heads) and MQA (kv_heads = 1) with the same "
    "query heads; adds measured and predicted speed-ups over MHA (default: off).")]
CudaGraphsOpt = Annotated[bool, typer.Option(
    "--cuda-graphs", help="Replay each call from a CUDA graph, removing launch gaps "
    "(CUDA only) (default: off).")]
L2Opt = Annotated[str, typer.Option(
    "--l2", help="Keeping the cache out of L2/LLC: auto (rotate over distinct caches "
    "totalling >= 8x the L2/LLC size, or flush when that would take > 64), rotate, flush, or none "
    "(default: auto).")]
CacheCeilingsOpt = Annotated[bool, typer.Option(
    "--cache-ceilings", help="Reuse this device's measured ceilings from "
    "~/.cache/kvcalc/ceilings.json, measuring and storing them when absent (default: off, "
    "measure every run).")]
TpOpt = Annotated[Optional[str], typer.Option(
    "--tp", help="Tensor-parallel degree(s), e.g. 2 or 1,2: that many torch.distributed "
    "ranks (gloo on a CPU, NCCL with one GPU per rank), each holding its query heads and "
    "their K/V heads; the output's all-reduce is real and timed (default: off, one "
    "process).")]
CalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate", help="Measure this device's decode terms (read and F.linear "
    "streaming, SDPA's K/V streaming, matmul FLOP/s, fixed costs per step and layer) "
    "and write them as a hardware file for `--gpu FILE` (default: off).")]
GpuOpt = Annotated[Optional[str], typer.Option(
    "--gpu", help="With --step model: the hardware preset or file (e.g. one --calibrate "
    "wrote) to predict on (default: calibrate this device first).")]

MEASURE = (
    ('heads', HeadsOpt, None),
    ('kv_heads', KvHeadsOpt, None),
    ('head_dim', HeadDimOpt, None),
    ('seq_len', SeqLenOpt, None),
    ('batch', BatchOpt, None),
    ('sweep', SweepOpt, False),
    ('plot', PlotOpt, None),
    ('dtype', DtypeOpt, None),
    ('device', DeviceOpt, "auto"),
    ('impl', ImplOpt, "auto"),
    ('step', StepOpt, None),
    ('prefill_tokens', PrefillTokensOpt, None),
    ('prefill_start', PrefillStartOpt, None),
    ('config_file', ConfigFileOpt, None),
    ('warmup', WarmupOpt, None),
    ('iters', ItersOpt, None),
    ('preset', PresetOpt, None),
    ('d_model', DModelOpt, None),
    ('compare', CompareOpt, False),
    ('cuda_graphs', CudaGraphsOpt, False),
    ('l2', L2Opt, "auto"),
    ('cache_ceilings', CacheCeilingsOpt, False),
    ('tp', TpOpt, None),
    ('calibrate', CalibrateOpt, False),
    ('gpu', GpuOpt, None),
    ('fmt', FormatOpt, None),
    ('output', OutputOpt, None),
    ('force', ForceOpt, False),
)
