#!/usr/bin/env bash
# How the records in tuning_logs/<target>/ were produced, on the machine they are for: every
# standard workload of autotune/workloads.py with the trials, exploration pass and
# options listed there. Re-run on a new machine to extend them (--resume measures only
# what is missing), or let one budget cover them all: pypto-tune all --minutes M.
#
#   benchmarks/ship_records.sh [GROUP|TEMPLATE ...]     (default all)
#   groups: matmul, conv, norm, ops (the PyTorch operators' own templates), grad (the
#   norms' and gelu's forward and backward in any dtype), int8, all
set -euo pipefail
templates=""
for word in "${@:-all}"; do
  case "$word" in
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    matmul) templates+=" matmul batch_matmul dense_bias_gelu" ;;
    conv) templates+=" conv2d_nchw depthwise_conv2d_nchw conv2d_nchw_winograd" ;;
    norm) templates+=" softmax layernorm rmsnorm" ;;
    ops) templates+=" attention moe gelu" ;;
    grad) templates+=" softmax_fwd layernorm_fwd rmsnorm_fwd gelu_backward softmax_backward"
          templates+=" layernorm_backward rmsnorm_backward" ;;
    int8) templates+=" dense dense_requant" ;;
    all) templates="" ; break ;;
    -*) echo "ship_records.sh: unknown option '$word'" >&2; exit 2 ;;
    *) templates+=" $word" ;;  # a template: pypto-tune list --shell checks the name
  esac
done
cd "$(dirname "$0")/.."
T=$(python -c 'import pypto; print(pypto.Target("host").key)')  # records are per target
tune() {  # the tuner given after the defaults wins
  local name=$1
  shift
  python -m autotune "$name" --tuner xgb --resume --no-progress "$@" </dev/null
}
# shellcheck disable=SC2086  # $templates and $opts are lists of words
python -m autotune list --shell $templates | while read -r name args trials explore opts; do
  log="tuning_logs/$T/$name.jsonl"
  if [ "$explore" -gt 0 ]; then
    # a random pass first (conv2d's): its knobs, the micro-kernel's (ukernel) among them,
    # explored before the model-guided one ranks them
    tune "$name" --args "$args" --trials "$explore" --tuner random --confirm 0 $opts --log "$log"
  fi
  tune "$name" --args "$args" --trials "$trials" $opts --log "$log"
done
