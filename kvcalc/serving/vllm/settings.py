"""The engine flags that decide vLLM's capacity, and the defaults each release fills in.

Facts (quoted, not copied code; see the package docstring for the versions read):

* default batch limits (`EngineArgs.get_batch_defaults`, 0.33; 0.8.5 for 0.8-0.29):
  the release's table (kvcalc.serving.vllm.rules, `Rules.batch_defaults`).
* async scheduling (0.27+, V1, PP = 1) doubles the tokens in flight per request
  (`async_scheduling_on`; kvcalc.serving.vllm.blocks counts what they hold).
"""

from __future__ import annotations

import dataclasses

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import MAX_SEQ_LEN, check_size, dtype, weight_dtype as _weight_dtype
from kvcalc.serving.releases import DEFAULT_RELEASE
from kvcalc.serving.vllm.rules import Rules, parse_release, rules_for
from kvcalc.spec import Hardware

__all__ = ["GiB", "MiB", "EngineSettings", "async_scheduling_on", "default_batch_limits",
           "device_total_bytes", "settings_for"]

GiB = 1 << 30
MiB = 1 << 20


@record
class EngineSettings:
    """The engine flags that decide capacity (vLLM's names; None = the engine default).

    `engine`: "v1" (default) or "v0" (the pre-2025 engine: blocks of all layers,
    driver-only sampler). `vllm_version` picks the era of each rule (kvcalc.serving.vllm.rules).
    `weights_bytes`: measured weights per device, overrides kvcalc's count (use it for
    quantized checkpoints). `kv_cache_memory_bytes`: vLLM's --kv-cache-memory.
    `usage`: "server" (vllm serve, the default) or "llm" (the LLM class), for defaults.
    """

    max_model_len: int
    gpu_memory_utilization: float | str = "0.9"
    tp: int = 1
    pp: int = 1
    # --data-parallel-size: replicas of tp x pp GPUs, each an engine with a KV pool of its
    # own; a MoE model's expert layers are sharded over tp x dp GPUs even so
    # (`config/parallel.py::ParallelConfig.data_parallel_size`).
    dp: int = 1
    # --enable-expert-parallel: those tp x dp GPUs hold whole experts, not slices of each
    # (`model_executor/layers/fused_moe/config.py::FusedMoEParallelConfig.make`)
    enable_expert_parallel: bool = False
    block_size: int | None = None  # None: 16 (raised for hybrid state models)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_dtype: str = "auto"  # "auto": the model dtype
    mamba_ssm_dtype: str = "auto"  # recurrent-state dtype; "auto": the model dtype (vLLM 0.33)
    model_dtype: str = "bf16"
    weight_dtype: str | None = None  # None: as the config stores (else the model dtype);
    # a dtype: every matrix but embeddings, quantized ones with scales per group_size
    group_size: int | None = None
    # kvcalc.quant's Quantization the weights are stored in, as the estimate read it (the
    # config's, or a dtype's): it replaces weight_dtype and group_size, so that both
    # counts price one checkpoint alike
    weight_quantization: object = None
    weights_bytes: int | None = None
    # Measured terms (a `kvcalc check -o` calibration file) in place of the modelled ones.
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    # The dummy sampler's top-k/top-p path: "sort", "flashinfer" or "triton"; None: the
    # release's default (kvcalc.serving.vllm.rules, `Rules.sampler_path`).
    sampler: str | None = None
    chunked_prefill: bool | None = None  # None: the engine's default
    async_scheduling: bool | None = None  # None: on for V1 0.14+ with PP = 1
    # --enable-prefix-caching; None: the release's default for the model's kind (it
    # decides how many state pages a hybrid's request takes, kvcalc.serving.vllm.state)
    prefix_caching: bool | None = None
    engine: str = "v1"
    vllm_version: str = DEFAULT_RELEASE["vllm"]
    usage: str = "server"
    num_gpu_blocks_override: int | None = None
    encoder_len: int | None = None  # cross-attention tokens (encoder-decoder); None: max_model_len
    # vLLM refuses a max_model_len above the model's own context unless the environment
    # sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the CLI reads that variable into this flag.
    allow_long_max_model_len: bool = False
    # --speculative-config, the JSON text as vLLM takes it (kvcalc.serving.speculative):
    # the draft's weights join "Model loading took", its attention layers the KV groups
    speculative_config: str | None = None
    # --enable-lora, --max-loras (1), --max-lora-rank (16), --lora-dtype (auto),
    # --lora-target-modules (0.19+; None: every linear module and the embedding modules):
    # the adapters' slots load with the weights (kvcalc.serving.lora)
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    lora_dtype: str = "auto"
    lora_target_modules: str | None = None
    # --limit-mm-per-prompt, the text as vLLM takes it ('{"image": 2}', or 'image=2'): the
    # images a prompt may carry, which size the multimodal profile (kvcalc.serving.vllm.encoder)
    limit_mm_per_prompt: str | None = None
    # --mm-encoder-tp-mode: "weights" (default: the vision encoder split over tp like the
    # text model) or "data" (its whole weights on every rank, the images split over them)
    mm_encoder_tp_mode: str = "weights"

    def __post_init__(self) -> None:
        check_size("max_model_len", self.max_model_len, MAX_SEQ_LEN)
        check_size("tp", self.tp, 4096)
        check_size("pp", self.pp, 4096)
        check_size("dp", self.dp, 4096)
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs", "weights_bytes",
                     "group_size",
                     "kv_cache_memory_bytes", "num_gpu_blocks_override", "encoder_len"):
            v = getattr(self, name)
            if v is not None:
                check_size(name, v, 1 << 60)
        for name in ("activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not 0 <= v < 1 << 60):
                raise KvcalcError(f"{name} must be a whole number of bytes >= 0, got {v!r}")
        if self.engine not in ("v0", "v1"):
            raise KvcalcError(f"engine must be 'v0' or 'v1', got {self.engine!r}")
        if self.sampler not in (None, "sort", "flashinfer", "triton"):
            raise KvcalcError(f"sampler must be 'sort', 'flashinfer' or 'triton', got "
                              f"{self.sampler!r}")
        if self.usage not in ("server", "llm"):
            raise KvcalcError(f"usage must be 'server' or 'llm', got {self.usage!r}")
        num, den = self.utilization
        if not 0 < num <= den:
            raise KvcalcError(f"gpu_memory_utilization must be in (0, 1], got "
                              f"{self.gpu_memory_utilization}")
        parse_release(self.vllm_version)
        dtype(self.model_dtype)
        for name in ("kv_dtype", "mamba_ssm_dtype"):
            if getattr(self, name) != "auto":
                dtype(getattr(self, name))
        if self.weight_dtype is not None:
            _weight_dtype(self.weight_dtype)  # a dtype, or awq/gptq

    @property
    def utilization(self) -> tuple[int, int]:
        """gpu_memory_utilization as an exact (numerator, denominator): "0.9" -> (9, 10),
        not 0.9000000000000000222."""
        u = self.gpu_memory_utilization
        try:
            return _num.exact_ratio(u)
        except (ValueError, ZeroDivisionError):
            raise KvcalcError(f"gpu_memory_utilization must be a number, got {u!r}") from None

    @property
    def layout(self):
        """The deployment's layout (kvcalc.serving.layout.Layout): dp replicas of tp x pp
        GPUs; attention split over tp within each (a replica's K/V heads are tp's), and,
        with expert parallelism, ep = tp x dp GPUs holding whole experts (vLLM's use_ep:
        dp x tp > 1 and --enable-expert-parallel)."""
        from kvcalc.serving.layout import Layout

        return Layout(tp=self.tp, pp=self.pp, dp=self.dp, ep=self.tp * self.dp
                      if self.expert_parallel else 1)

    @property
    def expert_parallel(self) -> bool:
        return self.enable_expert_parallel and self.tp * self.dp > 1

    @property
    def weights(self):
        """The checkpoint as every engine loads it (kvcalc.serving.weights.Weights)."""
        from kvcalc.serving.weights import Weights

        return Weights(model_dtype=self.model_dtype, weight_dtype=self.weight_dtype,
                       group_size=self.group_size,
                       weight_quantization=self.weight_quantization,
                       weights_bytes=self.weights_bytes)

    @property
    def rules(self) -> Rules:
        """The release's rules for the engine it runs (kvcalc.serving.vllm.rules)."""
        return rules_for(self.vllm_version, self.engine)

    def replace(self, **changes) -> "EngineSettings":
        return dataclasses.replace(self, **changes)


def settings_for(workload, **engine) -> EngineSettings:
    """The engine's settings for a workload: max_model_len its seq_len, its tp and KV
    dtype, its weights as the estimate stores them; `engine` overrides (vLLM's names)."""
    kv = workload.kv_dtype.name
    q = workload.quantization  # a checkpoint's AsStored whole: its headers' bytes count
    weight = workload.weight_dtype.name
    base = dict(max_model_len=workload.seq_len, tp=workload.tp,
                encoder_len=workload.encoder_seq_len,
                kv_dtype="auto" if kv == "bf16" else kv,
                weight_dtype=None if q is not None or weight == "bf16" else weight,
                weight_quantization=q)
    return EngineSettings(**{**base, **engine})



# --------------------------------------------------------------------------------
# Defaults the engine picks
# --------------------------------------------------------------------------------
def default_batch_limits(hw: Hardware, s: EngineSettings,
                         max_model_len: int | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM fills them in, the user's own first,
    for requests of `max_model_len` tokens (s.max_model_len unless given: a sweep asks at
    each of its lengths without building settings for each): the release's defaults
    (`Rules.batch_defaults`), then min(tokens, seqs x max_model_len) unless the user set
    the tokens."""
    length = s.max_model_len if max_model_len is None else max_model_len
    tokens, seqs = s.rules.batch_defaults(total=device_total_bytes(hw), device=hw.name,
                                          usage=s.usage, chunked=_chunked_prefill(s, length),
                                          max_model_len=length)
    if s.max_num_seqs is not None:
        seqs = s.max_num_seqs
    if s.max_num_batched_tokens is not None:
        tokens = s.max_num_batched_tokens
    else:
        tokens = min(tokens, seqs * length)
    return tokens, seqs


def _chunked_prefill(s: EngineSettings, max_model_len: int) -> bool:
    if s.chunked_prefill is not None:
        return s.chunked_prefill
    if s.engine == "v0":
        return max_model_len > 32768
    return True


def async_scheduling_on(s: EngineSettings) -> bool:
    """Whether the engine schedules a step while the last one runs (then twice the
    batched tokens are in flight per request)."""
    if s.async_scheduling is not None:
        return s.async_scheduling
    return s.rules.async_scheduling(s.pp)


def device_total_bytes(hw: Hardware) -> int:
    """Driver-visible bytes (torch.cuda.mem_get_info's total), nominal if the preset lacks it."""
    v = getattr(hw, "visible_memory_bytes", 0) or 0
    return v if v > 0 else hw.memory_bytes
