"""The launch lines of a disaggregated split (`kvcalc plan --disaggregated`): the prefill
instances' and the decode instances' `vllm serve` lines, in vLLM's own spelling, and what
runs between them.

Read from vLLM's source (the wheels of 0.11.0 and 0.33.0; plan's lines are checked by
0.32's parser, tests/test_plan_disagg.py):

* the connector: `NixlConnector`, registered under that name in both releases
  (vllm/distributed/kv_transfer/kv_connector/factory.py, the
  KVConnectorFactory.register_connector calls at the module's end; 0.33 dropped
  P2pNcclConnector from that list, so NIXL is the one connector both ship for xPyD);
* the roles: KVTransferConfig.kv_role (vllm/config/kv_transfer.py) takes kv_producer,
  kv_consumer or kv_both, and KVTransferConfig.__post_init__ refuses a kv_connector
  without a kv_role. 0.11's NixlConnector ignores the role (the proxy's
  kv_transfer_params decide each request's side); 0.33's NixlBaseConnector.__init__
  (vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py) warns that kv_both
  "is deprecated ... Please set kv_role='kv_producer' for prefill instances and
  kv_role='kv_consumer' for decode instances", as docs/features/nixl_connector_usage.md
  writes its multi-instance example: those two, valid in both;
* nothing else in the JSON: every other KVTransferConfig field keeps its default
  (kv_buffer_device, kv_port, kv_connector_extra_config, and 0.33's
  kv_load_failure_policy, whose default is already "fail");
* x instances a side: --data-parallel-size x (plan's co-located line writes its replicas
  so); NIXL's side channel takes a port per data-parallel rank from
  VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600; 0.11's NixlConnectorScheduler: + rank x tp,
  0.33's NixlBaseScheduler (nixl/base_scheduler.py): + the rank's index), so on one host
  the decode line starts its ports past the prefill ranks';
* between them: vLLM's wheel ships no proxy. Its docs (docs/features/nixl_connector_usage.md,
  "Proxy Server") run tests/v1/kv_connector/nixl_integration/toy_proxy_server.py from
  vLLM's source tree, which sends each request to a prefill instance with max_tokens 1
  and kv_transfer_params do_remote_decode, then to a decode instance with the
  kv_transfer_params the prefill answered; its defaults are prefill port 8100 and decode
  port 8200, the ports these lines give.

Memory flags as plan's co-located line writes them (kvcalc.plan.launch.serve_words): each
side's tp, --max-model-len, the --gpu-memory-utilization it was counted at,
--max-num-seqs its batch (prefill: the prompts a step it was timed with; decode: the batch
that meets --tpot-ms), the prefill's step budget (--max-num-batched-tokens, which its
times assume), --kv-cache-dtype where not auto (both sides the same: NIXL's handshake
refuses a mismatch, docs/features/nixl_connector_compatibility.md).

Pure: no I/O.
"""

from __future__ import annotations

import json
import shlex

__all__ = ["CONNECTOR", "KV_TRANSFER_FIELDS", "PORTS", "ROLES", "SIDE_CHANNEL_PORT",
           "kv_transfer_config", "launch", "prefill_seqs"]

CONNECTOR = "NixlConnector"
ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
PORTS = {"prefill": 8100, "decode": 8200}  # toy_proxy_server.py's --prefiller/--decoder-ports
SIDE_CHANNEL_PORT = 5600  # VLLM_NIXL_SIDE_CHANNEL_PORT's default (vllm/envs.py)
PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"

# The KVTransferConfig fields the lines set: (field, the value's type, where vLLM declares
# it). tests/test_plan_disagg.py checks them against the source without vLLM installed.
KV_TRANSFER_FIELDS = (
    ("kv_connector", str, "vllm/config/kv_transfer.py KVTransferConfig.kv_connector: "
     "str | None; the name KVConnectorFactory.register_connector gave it (factory.py)"),
    ("kv_role", str, "vllm/config/kv_transfer.py KVTransferConfig.kv_role: KVRole, "
     "Literal kv_producer | kv_consumer | kv_both"),
)


def kv_transfer_config(side: str) -> str:
    """The --kv-transfer-config JSON of `side` ("prefill" or "decode"), compact."""
    return json.dumps({"kv_connector": CONNECTOR, "kv_role": ROLES[side]},
                      separators=(",", ":"))


def prefill_seqs(pre: dict, prompt: int) -> int:
    """The prompts a prefill instance's step holds, as kvcalc.plan.disagg.prefill_side
    times it: whole prompts within the budget, else one prompt in chunks."""
    budget = pre["max_num_batched_tokens"]
    return budget // prompt if prompt <= budget else 1


def _line(model: str, side: str, tp: int, instances: int, length: int, util: str,
          seqs: int, kv: str, budget: int | None) -> str:
    from kvcalc.plan.launch import serve_words

    parts = serve_words(model, tp=tp, pp=1, replicas=instances, max_model_len=length,
                        gpu_memory_utilization=util, max_num_seqs=seqs,
                        max_num_batched_tokens=budget, kv_dtype=kv)
    parts += ["--port", str(PORTS[side]),
              "--kv-transfer-config", shlex.quote(kv_transfer_config(side))]
    return " ".join(parts)


def _instances(n: int, tp: int, side: str) -> str:
    said = f"{n} {side} instance{'s' * (n > 1)} of tp {tp}"
    return said + (" (its line's --data-parallel-size)" if n > 1 else "")


def launch(model: str, x: dict, *, prompt: int, length: int, util: str,
           state: bool = False) -> dict:
    """The split `x` (kvcalc.plan.disagg.disaggregated's record) as vLLM lines: prefill,
    decode, and what runs between them (`between`, words), JSON-ready. `state`: the model
    has state (Mamba-like) layers, for which NIXL wants one tp on both sides."""
    pre, dec, kv = x["prefill"], x["decode"], x["kv_cache_dtype"]
    first_decode_port = SIDE_CHANNEL_PORT + pre["instances"] * pre["tp"]
    gpus = pre["instances"] * pre["tp"]
    total = gpus + dec["instances"] * dec["tp"]
    devices = {"prefill": ",".join(map(str, range(gpus))),
               "decode": ",".join(map(str, range(gpus, total)))}
    between = (
        f"{_instances(pre['instances'], pre['tp'], 'prefill')} and "
        f"{_instances(dec['instances'], dec['tp'], 'decode')}, {CONNECTOR} (pip install "
        f"nixl); where the {total} GPUs are one host, run the prefill line with "
        f"CUDA_VISIBLE_DEVICES={devices['prefill']} "
        f"VLLM_NIXL_SIDE_CHANNEL_PORT={SIDE_CHANNEL_PORT} and the decode line with "
        f"CUDA_VISIBLE_DEVICES={devices['decode']} "
        f"VLLM_NIXL_SIDE_CHANNEL_PORT={first_decode_port}; between them a proxy sends each "
        f"request to prefill (max_tokens 1), then to decode with the KV's address: vLLM "
        f"ships none, its docs (docs/features/nixl_connector_usage.md) run {PROXY} from "
        f"vLLM's source tree --port 8192 --prefiller-hosts localhost --prefiller-ports "
        f"{PORTS['prefill']} --decoder-hosts localhost --decoder-ports {PORTS['decode']}")
    if state and pre["tp"] != dec["tp"]:  # docs/features/nixl_connector_compatibility.md
        between += ("; vLLM's NIXL compatibility matrix wants hybrid state (Mamba) models at "
                    "one tp on both sides (heterogeneous tp is work in progress there)")
    return {"connector": CONNECTOR,
            "prefill": _line(model, "prefill", pre["tp"], pre["instances"], length, util,
                             prefill_seqs(pre, prompt), kv, pre["max_num_batched_tokens"]),
            "decode": _line(model, "decode", dec["tp"], dec["instances"], length, util,
                            dec["batch"], kv, None),
            "prefill_instances": pre["instances"], "prefill_tp": pre["tp"],
            "decode_instances": dec["instances"], "decode_tp": dec["tp"],
            "between": between}
