"""The release each engine's memory is counted for when none is named: the newest whose
source was read for every rule in its wing. Written here once (a leaf: it imports
nothing, so every wing and command may read it)."""

DEFAULT_RELEASE = {"vllm": "0.33", "sglang": "0.5.4", "tensorrt-llm": "1.0"}
