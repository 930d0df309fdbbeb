#!/usr/bin/env bash
# Measure decode attention on this CPU and commit-ready reports under reports/.
# Run on an otherwise idle machine: other processes on the cores skew every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(python3 -c "from kvcalc.measure.ceilings import cpu_name; import re; print(re.sub('[^a-z0-9]+', '-', cpu_name().lower()).strip('-'))")
tag="cpu-${host}-$(nproc)core-$(date -u +%Y-%m-%d)"
kvcalc measure --heads 32 --kv-heads 8 --compare --impl all --step both \
    --format csv -o "reports/${tag}-impls.csv"
kvcalc measure --heads 32 --kv-heads 8 --compare --sweep --seq-len 512:8192:*2 --batch 1,4 \
    --format csv -o "reports/${tag}-sweep.csv" --plot "reports/${tag}-sweep.png"
python3 benchmarks/summarize_reports.py reports
