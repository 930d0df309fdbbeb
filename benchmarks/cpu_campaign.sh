#!/usr/bin/env bash
# Measure decode attention on this CPU and write commit-ready reports under reports/.
# Other processes on the cores skew every figure: each measurement waits (up to
# WAIT_TRIES x ~8 s) for other processes to use < IDLE_CORES cores, and every row records the
# load, the CPU time other processes took while it was timed, the clock and threads,
# flagging a row timed on a busy host as LOADED.
set -euo pipefail
cd "$(dirname "$0")/.."
WAIT_TRIES=${WAIT_TRIES:-120}
host=$(python3 -c "from kvcalc.measure.ceilings import cpu_name; import re; print(re.sub('[^a-z0-9]+', '-', cpu_name().lower()).strip('-'))")
tag="cpu-${host}-$(nproc)core-$(date -u +%Y-%m-%d)"

# Quiet: other processes used under IDLE_CORES cores over the last 3 s (/proc/stat).
busy_cores() {
    python3 - <<'PY'
import time
def busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[0] + f[1] + f[2] + f[5] + f[6] + f[7], time.time()
a, t0 = busy(); time.sleep(3); b, t1 = busy()
print(f"{(b - a) / 100 / (t1 - t0):.2f}")
PY
}
wait_idle() {
    for _ in $(seq "$WAIT_TRIES"); do
        b=$(busy_cores)
        if python3 -c "import sys; sys.exit(not ($b < ${IDLE_CORES:-0.15}))"; then return 0; fi
        echo "waiting for a quiet host: ${b} cores busy, 1-minute load $(cut -d' ' -f1 /proc/loadavg)" >&2
        sleep 5
    done
    echo "host still busy; measuring anyway (rows will say LOADED)" >&2
}

# auto (the default impl) and every named one, MHA / GQA-8 / MQA through one impl each
wait_idle
kvcalc measure --heads 32 --kv-heads 8 --compare --impl auto,all --step both \
    --format csv -o "reports/${tag}-impls.csv"
wait_idle
kvcalc measure --heads 32 --kv-heads 8 --compare --sweep --seq-len 512:8192:*2 --batch 1,4 \
    --format csv -o "reports/${tag}-sweep.csv" --plot "reports/${tag}-sweep.png"
# tensor parallelism: 1 vs 2 ranks (gloo), layer step, MHA and GQA-8
wait_idle
kvcalc measure --heads 32 --kv-heads 32 --tp 1,2 --step layer --format csv -o "reports/${tag}-tp-mha.csv"
wait_idle
kvcalc measure --heads 32 --kv-heads 8 --tp 1,2 --step layer --format csv -o "reports/${tag}-tp-gqa8.csv"
python3 benchmarks/summarize_reports.py reports
