#!/usr/bin/env bash
# How the records in tuning_logs/<target>/ were produced, on the machine they are for: every
# standard workload of autotune/workloads.py with the trials, exploration pass and
# options listed there. Re-run on a new machine to extend them (--resume measures only
# what is missing), or let one budget cover them all: pypto-tune all --minutes M.
#
#   benchmarks/ship_records.sh [matmul|conv|norm|ops|all]     (default all)
set -euo pipefail
case "${1:-all}" in
  -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  matmul) templates="matmul batch_matmul dense_bias_gelu" ;;
  conv) templates="conv2d_nchw depthwise_conv2d_nchw" ;;
  norm) templates="softmax layernorm rmsnorm" ;;
  ops) templates="attention moe gelu" ;;  # the PyTorch operators' own templates
  all) templates="" ;;
  *) echo "ship_records.sh: unknown group '$1' (matmul, conv, norm, ops or all)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
T=$(python -c 'import pypto; print(pypto.Target("host").key)')  # records are per target
tune() {  # the tuner given after the defaults wins
  local name=$1
  shift
  python -m autotune "$name" --tuner xgb --resume --no-progress "$@" </dev/null
}
# shellcheck disable=SC2086  # $templates and $opts are lists of words
python -m autotune.workloads --shell $templates | while read -r name args trials explore opts; do
  log="tuning_logs/$T/$name.jsonl"
  if [ "$explore" -gt 0 ]; then
    # conv2d's micro-kernel knob (ukernel) is seen by the cost model only through the partial
    # tiles it keeps: a random pass explores it before the model-guided one
    tune "$name" --args "$args" --trials "$explore" --tuner random --confirm 0 $opts --log "$log"
  fi
  tune "$name" --args "$args" --trials "$trials" $opts --log "$log"
done
