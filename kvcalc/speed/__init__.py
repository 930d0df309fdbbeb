"""Time from bytes, FLOPs and a device's terms: the roofline bounds (roofline), the time to
first token and per output token (latency), tensor- and pipeline-parallel communication
(comm). Below the estimate; the speed as served, under load, is kvcalc.served.
"""
