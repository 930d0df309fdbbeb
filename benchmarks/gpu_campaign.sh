#!/usr/bin/env bash
# Measure on this machine's CUDA GPU and write commit-ready reports named after the GPU
# and the day, under DIR (default reports/): decode attention and a decode layer
# (every impl, MHA / GQA-8 / MQA), a context x batch sweep through CUDA graphs, the
# device's calibration file (kvcalc measure --calibrate), and whole decode steps of
# dense presets set beside `kvcalc estimate --gpu <that file>`. Run on an idle GPU;
# every row names the device, torch/CUDA versions and its timer (CUDA events).
# PARTS="kernels steps" (the default) picks what runs: `kernels` the attention and layer
# measurements, `steps` the calibration and the whole decode steps.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-reports}
py=${PYTHON:-python3}
gpu=$($py -c "import re, torch; print(re.sub('[^a-z0-9]+', '-', torch.cuda.get_device_name().lower()).strip('-'))")
tag="gpu-${gpu}-$(date -u +%Y-%m-%d)"
k="$py -m kvcalc measure --device cuda"
parts_to_run=${PARTS:-kernels steps}
if [[ " $parts_to_run " == *" kernels "* ]]; then
# every named impl and auto's pick, MHA / GQA-8 / MQA, attention alone and the layer step
$k --heads 32 --kv-heads 8 --compare --impl auto,all --step both --format csv \
    -o "$dir/${tag}-impls.csv"
# the same through CUDA graphs over context and batch: where launch gaps stop mattering
$k --heads 32 --kv-heads 8 --compare --cuda-graphs --sweep --seq-len 1024:32768:*4 \
    --batch 1,8,64 --format csv -o "$dir/${tag}-sweep.csv" --plot "$dir/${tag}-sweep.png"
# a whole decode layer of Llama-3-8B's shape
$k --preset llama3-8b --compare --step layer --cuda-graphs --format csv \
    -o "$dir/${tag}-llama3-8b-layer.csv"
fi
[[ " $parts_to_run " == *" steps "* ]] || exit 0
# the device's own terms, then whole decode steps predicted from them
cal="$dir/${tag}-calibration.yaml"
$k --calibrate -o "$cal"
parts=()
for run in "llama3.2-1b 1024 1" "llama3-8b 1024 1" "llama3-8b 4096 16" "llama3-8b 1024 64" \
           "llama2-7b 4096 4"; do
    set -- $run
    for graphs in "" "--cuda-graphs"; do
        part=$(mktemp --suffix .csv)
        # one failure (out of memory, a refusal) is reported, the rest still run
        if $k --step model --preset "$1" --seq-len "$2" --batch "$3" --gpu "$cal" $graphs \
            --format csv -o "$part" --force; then
            parts+=("$part")
        else
            echo "model step $run $graphs failed" >&2
        fi
    done
done
$py benchmarks/merge_csv.py "$dir/${tag}-model-steps.csv" "${parts[@]}"
rm -f "${parts[@]}"
