#!/usr/bin/env bash
# The loop from measurement to prediction on this CPU: the device's calibration file
# (kvcalc measure --calibrate), then whole decode steps of small dense presets set beside
# `kvcalc estimate --gpu <that file>`, written under DIR (default reports/). Run on a quiet
# host: every row records the load and other processes' CPU time while it was timed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-reports}
py=${PYTHON:-python3}
host=$($py -c "from kvcalc.measure.ceilings import cpu_name; import re; print(re.sub('[^a-z0-9]+', '-', cpu_name().lower()).strip('-'))")
tag="cpu-${host}-$(nproc)core-$(date -u +%Y-%m-%d)"
k="$py -m kvcalc measure --device cpu"
cal="$dir/${tag}-calibration.yaml"
$k --calibrate -o "$cal"
parts=()
for run in "gpt2 256 1" "gpt2 1024 4" "llama3.2-1b 256 1" "qwen3-0.6b 512 2"; do
    set -- $run
    part=$(mktemp --suffix .csv)
    $k --step model --preset "$1" --seq-len "$2" --batch "$3" --gpu "$cal" --format csv \
        -o "$part" --force
    parts+=("$part")
done
$py benchmarks/merge_csv.py "$dir/${tag}-model-steps.csv" "${parts[@]}"
rm -f "${parts[@]}"
