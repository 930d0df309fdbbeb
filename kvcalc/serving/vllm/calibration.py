"""What a start-up log taught about one GPU and vLLM release: the terms vLLM measured,
kept in a YAML file (`kvcalc check LOG -o calib.yaml`) that `fit --calibration FILE`
and `plan --calibration FILE` use in place of kvcalc's modelled terms.

The file (strict keys; an unknown one is refused by name):

    source: what it was learnt from (the log's file name)
    vllm_version: "0.9.2"        # the release whose rules the rest of the count follows
    engine: v1
    gpu: h100-sxm                # the hardware preset the log was checked on
    model: "Qwen/Qwen3-8B"       # the model the log names (else the one checked)
    model_params: 8190735360     # its parameters as kvcalc counts them: which model
    tp: 1                        # the layout the log ran: every term is per device
    pp: 1                        #   of it (weights, activation peak, NCCL's buffers)
    visible_memory_bytes: ...    # the driver's total, when the log printed it
    weights_bytes: ...           # each term the log printed; those absent stay modelled
    activation_peak_bytes: ...
    non_torch_bytes: ...
    cuda_graph_bytes: ...

The activation peak and the weights belong to the model, the layout (tp, pp) and the
batch limits the log ran with as much as to the GPU: the file says which they were.
`fit` takes the file only for that model, GPU, tp and pp; `plan` applies the terms to
the layouts of that tp and pp and prices the others with kvcalc's models.

A file without tp and pp (kvcalc before it recorded them) is refused, not read as tp 1:
its terms are per device of a layout it does not name, and a tp-2 log's weights read as
one GPU's would be half the real ones, a wrong yes; `kvcalc check LOG -o FILE` writes
it again in a second.
"""

from __future__ import annotations

from pathlib import Path

from kvcalc.ground.record import record
from kvcalc.serving.vllm.rules import parse_release
from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.errors import KvcalcError, ParameterError, literal

__all__ = ["Calibration", "calibration_text", "read_calibration"]

OLD_FILE = ("records no tp and pp (written before kvcalc kept them), and its terms are per "
            "device of the layout its log ran: write it again with `kvcalc check LOG -o FILE`")

_TERM_KEYS = {"weights": "weights_bytes", "activation_peak": "activation_peak_bytes",
              "non_torch": "non_torch_bytes", "cuda_graphs": "cuda_graph_bytes"}
_KEYS = ("source", "vllm_version", "engine", "gpu", "model", "sampler",
         "max_num_batched_tokens", "max_num_seqs", "visible_memory_bytes", *_TERM_KEYS.values(),
         "tp", "pp", "model_params")
_WHOLE = _KEYS[6:]  # whole numbers


@record
class Calibration:
    """A calibration file's contents (bytes; None: not learnt)."""

    source: str
    vllm_version: str
    engine: str = "v1"
    gpu: str | None = None
    model: str | None = None
    sampler: str | None = None  # the top-k/top-p path the log names (memory.SAMPLER_PATHS)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    visible_memory_bytes: int | None = None
    weights_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    tp: int = 1  # the log's layout (read_calibration refuses a file without them)
    pp: int = 1
    model_params: int | None = None  # the checked model's parameters (None: not said)

    def matches(self, tp: int, pp: int) -> bool:
        """Whether a layout of `tp` x `pp` devices is the one the terms were measured on."""
        return (tp, pp) == (self.tp, self.pp)

    def check_for(self, spec, hw, where: str) -> None:
        """Refuse (one line) a file learnt on another GPU or another model: its terms say
        nothing of this one."""
        if self.gpu is not None and self.gpu != hw.name:
            raise KvcalcError(f"--calibration {where}: learnt on {self.gpu}, not {hw.name}: "
                              f"its measured terms are that GPU's")
        if self.model_params is not None:
            from kvcalc.formulas.params import param_counts

            n = param_counts(spec).total
            if n != self.model_params:
                raise KvcalcError(
                    f"--calibration {where}: learnt on {self.model or 'another model'} "
                    f"({self.model_params:,} parameters), not {spec.name} ({n:,}): its "
                    f"measured weights and activation peak are that model's")

    def layout_words(self) -> str:
        return f"tp={self.tp} pp={self.pp}"

    def summary(self, kept: list[bool], front: list[bool]) -> dict:
        """For plan's JSON: what the file was, how many kept layouts it priced (`kept`:
        whether each was calibrated), which rows of the front, and the note saying so."""
        mine = sum(kept)
        where = f"{self.layout_words()} (vLLM {self.vllm_version} on {self.gpu or 'its GPU'})"
        if mine:
            note = (f"measured terms of {self.source} priced the {mine:,} layouts of "
                    f"{where}; the other {len(kept) - mine:,} by kvcalc's models")
        else:
            note = (f"no layout kept is {self.layout_words()}, the layout {self.source} "
                    f"measured: all {len(kept):,} priced by kvcalc's models")
        return {"source": self.source, "vllm_version": self.vllm_version, "gpu": self.gpu,
                "model": self.model, "tp": self.tp, "pp": self.pp,
                "calibrated_layouts": mine, "other_layouts": len(kept) - mine,
                "front_calibrated": [i for i, c in enumerate(front) if c], "note": note}

    def apply(self, s: EngineSettings) -> EngineSettings:
        """`s` with the learnt terms in place of the modelled ones."""
        return s.replace(**{k: getattr(self, k) for k in
                            ("weights_bytes", "activation_peak_bytes", "non_torch_bytes",
                             "cuda_graph_bytes", "sampler") if getattr(self, k) is not None})


def calibration_text(check, source: str) -> str:
    """The YAML `kvcalc check -o` writes for a kvcalc.serving.vllm.check.LogCheck read from
    `source` (the log's file name)."""
    log, s, cap = check.log, check.settings, check.capacity
    lines = [f"# What vLLM {s.vllm_version} ({s.engine}) logged on {check.hardware}, read by "
             "`kvcalc check`.",
             "# `kvcalc fit --calibration FILE` and `kvcalc plan --calibration FILE` use these",
             "# terms in place of kvcalc's models; they are per device of this model at this",
             "# tp and pp, and the activation peak is that of these batch limits.",
             f"source: {_scalar(source)}",
             f"vllm_version: {_scalar(s.vllm_version)}",
             f"engine: {s.engine}",
             f"gpu: {_scalar(check.hardware)}"]
    lines.append(f"model: {_scalar(str(log.model or check.model))}")
    if check.model_params is not None:
        lines.append(f"model_params: {check.model_params}")
    lines += [f"tp: {s.tp}", f"pp: {s.pp}"]
    if s.sampler is not None:
        lines.append(f"sampler: {s.sampler}")
    lines += [f"max_num_batched_tokens: {cap.max_num_batched_tokens}",
              f"max_num_seqs: {cap.max_num_seqs}"]
    if "total" in log.terms:
        lines.append(f"visible_memory_bytes: {log.terms['total']}")
    from kvcalc.serving.vllm.check import graphs_subtracted

    for term, key in _TERM_KEYS.items():
        if term == "cuda_graphs" and term in log.terms and not graphs_subtracted(log, s):
            # logged but not subtracted by this start-up (0.18-0.19 print the estimate and
            # leave the graphs to the headroom): the budget it taught holds none
            lines.append(f"{key}: 0")
            continue
        if term in log.terms:
            lines.append(f"{key}: {log.terms[term]}")
    return "\n".join(lines) + "\n"


def _scalar(text: str) -> str:
    """A YAML double-quoted string (JSON's escapes are YAML's)."""
    import json

    return json.dumps(text, ensure_ascii=False)


def read_calibration(path: Path) -> Calibration:
    """A calibration file, strictly: unknown keys and wrong types are refused by name."""
    from kvcalc.ground.inputfile import read_text
    from kvcalc.ground.yamlread import parse

    where = str(path)
    try:
        data = parse(read_text(Path(path), where), where)
    except FileNotFoundError:
        raise ParameterError("{calibration} " + literal(path) + ": no such file",
                             "calibration") from None
    except IsADirectoryError:
        raise ParameterError("{calibration} " + literal(path) + ": is a folder, not a file",
                             "calibration") from None
    if not isinstance(data, dict):
        raise KvcalcError(f"{where}: a calibration file is a mapping of keys "
                          f"({', '.join(_KEYS)})")
    for key in data:
        if key not in _KEYS:
            raise KvcalcError(f"{where}: unknown key {key!r} (allowed: {', '.join(_KEYS)})")
    for key in ("source", "vllm_version"):
        if key not in data:
            raise KvcalcError(f"{where}: {key} is missing")
    for key in ("source", "vllm_version", "engine", "gpu", "model", "sampler"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise KvcalcError(f"{where}: {key} must be a string, got {data[key]!r}")
    for key in _WHOLE:
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0
                              or v >= 1 << 60):
            raise KvcalcError(f"{where}: {key} must be a whole number >= 0, got {v!r}")
    parse_release(data["vllm_version"])
    if data.get("engine", "v1") not in ("v0", "v1"):
        raise KvcalcError(f"{where}: engine must be 'v0' or 'v1', got {data['engine']!r}")
    if data.get("sampler") not in (None, "sort", "flashinfer", "triton"):
        raise KvcalcError(f"{where}: sampler must be sort, flashinfer or triton, got "
                          f"{data['sampler']!r}")
    for key in ("tp", "pp"):
        if data.get(key) == 0:
            raise KvcalcError(f"{where}: {key} must be a whole number >= 1, got 0")
    if data.get("tp") is None or data.get("pp") is None:
        raise KvcalcError(f"{where}: {OLD_FILE}")
    return Calibration(**data)
