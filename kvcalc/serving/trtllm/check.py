"""A TensorRT-LLM start-up log set beside kvcalc's count (`kvcalc check LOG` for
TensorRT-LLM): what the log states (release, runtime, max_seq_len, max_num_requests,
max_num_tokens, tokens per block, the fraction, the KV dtype) is the truth about that
start-up, the model and GPU are the user's, and each logged figure gets kvcalc's beside
it, from the settings alone and again from the memory the log measured (which isolates
the bytes per token and the block rounding from the terms kvcalc models)."""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.serving.failure import Diagnosis

__all__ = ["TrtllmCheck", "check_trtllm", "clamp_note", "diagnose_log"]

GiB = 1 << 30


@record
class TrtllmCheck:
    release: str
    backend: str
    rows: tuple  # kvcalc.serving.trtllm.log.Beside, one per logged figure
    tokens_from_logged_memory: int | None  # the pool from the memory the log measured
    refused: bool = False
    refusal: str = ""
    notes: tuple[str, ...] = ()
    diagnosis: Diagnosis | None = None  # why it did not start, and the fix

    def as_dict(self) -> dict:
        return {"engine": "tensorrt-llm", "engine_release": self.release,
                "backend": self.backend,
                "figures": [{"figure": r.name, "logged": r.logged, "kvcalc": r.counted,
                             "ratio": r.ratio} for r in self.rows],
                "tokens_from_logged_memory": self.tokens_from_logged_memory,
                "refused": self.refused, "refusal": self.refusal,
                "failure": None if self.diagnosis is None else self.diagnosis.as_dict(),
                "notes": list(self.notes)}


def diagnose_log(log, release: str | None = None) -> Diagnosis | None:
    """The cause and the fix of the failure a TrtllmLog records (None: none), with the
    settings the log and a command quoted with it state."""
    from kvcalc.serving.trtllm.fail import diagnose
    from kvcalc.serving.trtllm.log import stated_flags

    settings = {**log.command, **{k: v for k, v in stated_flags(log).items() if k != "backend"}}
    return diagnose(log.failure, settings, release=release or log.version)


def clamp_note(log) -> str:
    """What TensorRT-LLM did with a max_seq_len beyond the model's, where the log says."""
    c = log.clamp
    if not c:
        return ""
    if c["max_seq_len"] < c["max_seq_len_given"]:
        return (f"TensorRT-LLM cut --max_seq_len {c['max_seq_len_given']:,} to the model's "
                f"{c['max_seq_len_model']:,} (it does not refuse a longer one): requests are "
                f"served up to {c['max_seq_len']:,} tokens")
    return (f"TensorRT-LLM kept --max_seq_len {c['max_seq_len']:,}, beyond the model config's "
            f"{c['max_seq_len_model']:,}: positions past it are outside what the model was "
            "trained on")


def _from_logged_memory(log, counted, rules, backend: str, fraction) -> int | None:
    """The pool's tokens from the memory the log printed, through kvcalc's bytes per token
    and the release's rounding: a PyTorch log's estimate (or its available memory, the
    fraction already applied), a built engine's free memory times the fraction."""
    from kvcalc.serving.trtllm.pool import blocks_for, tokens_for

    f = log.figure
    tpb = f.get("tokens_per_block") or counted.page_size
    rounding = rules.pool_rounding(backend)
    if backend == "pytorch":
        tokens = f.get("estimated_max_tokens")
        per = f.get("kv_size_bytes_per_token") or dict(counted.pools)["kv_size_per_token"]
        # 1.1+: "Estimated max memory in KV cache : X GiB" is the estimate in bytes (after
        # the caps), which `configure_kv_cache_capacity` turns into max_tokens = X // the
        # estimate's bytes per token; before it, "available" is the same memory uncapped.
        for name in ("estimated_max_memory_gib", "available_gib"):
            if tokens is None and name in f and per:
                tokens = round(f[name] * GiB) // per
        return None if tokens is None else blocks_for(tokens, tpb, rounding) * tpb
    if "available_gib" not in f or not counted.bytes_per_token:
        return None
    tokens = tokens_for(round(f["available_gib"] * GiB), fraction, counted.bytes_per_token)
    return blocks_for(tokens, tpb, rounding) * tpb


def check_trtllm(text: str, spec, hw, *, release: str | None = None,
                 backend: str | None = None, weights=None, layout=None,
                 **flags) -> TrtllmCheck:
    """`text` (a TensorRT-LLM start-up log) beside kvcalc's count of `spec` on `hw`.
    `flags`: TrtllmFlags fields the user gives beyond what the log states (they win)."""
    from kvcalc.serving import DEFAULT_RELEASE, count, engine_ref
    from kvcalc.serving.layout import Layout
    from kvcalc.serving.trtllm import TrtllmFlags, _fraction
    from kvcalc.serving.trtllm.log import beside, read_log, stated_flags
    from kvcalc.serving.trtllm.rules import rules_for
    from kvcalc.serving.weights import Weights

    log = read_log(text)
    if len(log.figures) <= 1 and not log.refused:
        raise KvcalcError("the log holds no TensorRT-LLM memory line (Memory usage when "
                          "calculating max tokens, Peak memory during memory usage "
                          "profiling, Allocated ... for max tokens in paged KV cache): "
                          "paste it up to the KV cache allocation or the error that "
                          "stopped it")
    notes = []
    if release is None:
        release = log.version
        if release is None:
            release = DEFAULT_RELEASE["tensorrt-llm"]
            notes.append(f"the log does not print its TensorRT-LLM release: counted as "
                         f"{release} (give --engine tensorrt-llm@VERSION)")
    ref = engine_ref(f"tensorrt-llm@{release}")
    given = stated_flags(log)
    if backend is not None:
        given["backend"] = backend
    elif "backend" not in given:
        given["backend"] = rules_for(ref.release).default_backend()
        notes.append(f"the log does not say which runtime ran: counted as "
                     f"{given['backend']} (give --backend)")
    given.update(flags)
    tf = TrtllmFlags(engine=ref, weights=weights or Weights(), layout=layout or Layout(),
                     **given)
    counted = count(spec, hw, tf)
    rules = rules_for(ref.release)
    fnum, fden = (_fraction(tf.free_gpu_memory_fraction)
                  if tf.free_gpu_memory_fraction is not None
                  else rules.default_free_gpu_memory_fraction())
    fraction = rules.fraction_as_used("tensorrt", fnum, fden)
    from_memory = _from_logged_memory(log, counted, rules, tf.backend, fraction)
    if from_memory is not None:
        notes.append("tokens_from_logged_memory: the pool from the memory the log printed "
                     "(its bytes per token and block rounding alone)")
    note = clamp_note(log)
    return TrtllmCheck(release=ref.release, backend=tf.backend, rows=beside(log, counted),
                       tokens_from_logged_memory=from_memory, refused=log.refused,
                       refusal=log.refusal,
                       notes=tuple(notes) + ((note,) if note else ()) + counted.notes,
                       diagnosis=diagnose_log(log, ref.release))
