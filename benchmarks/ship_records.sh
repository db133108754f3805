#!/usr/bin/env bash
# How the records in tuning_logs/<target>/ were produced (on the machine they are for).
# Re-run on a new machine to extend them; --resume measures only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(python -c 'import pypto; print(pypto.Target("host").key)')  # records are per target
tune() { python -m autotune "$@" --tuner xgb --resume --no-progress; }
case "${1:-all}" in
  matmul|all)
    tune matmul --args 512,512,512 --trials 48 --log tuning_logs/$T/matmul.jsonl
    tune matmul --args 1024,1024,1024 --trials 112 --log tuning_logs/$T/matmul.jsonl
    tune matmul --args 2048,2048,2048 --trials 48 --timeout 30 --number 2 --log tuning_logs/$T/matmul.jsonl
    tune matmul --args 128,3072,768 --trials 48 --log tuning_logs/$T/matmul.jsonl
    tune batch_matmul --args 8,256,256,256 --trials 32 --log tuning_logs/$T/batch_matmul.jsonl
    tune dense_bias_gelu --args 128,3072,768 --trials 48 --log tuning_logs/$T/dense_bias_gelu.jsonl
    ;;&
  conv|all)
    # the micro-kernel knob (ukernel) came later: records from before it carry ukernel 0
    # (the schedule they measured); a random pass explored it before the model-guided one
    tune conv2d_nchw --args 1,64,56,56,64,3,3,1,1 --trials 128 --log tuning_logs/$T/conv2d_nchw.jsonl
    tune conv2d_nchw --args 1,64,56,56,64,3,3,1,1 --trials 185 --tuner random --confirm 0 \
      --log tuning_logs/$T/conv2d_nchw.jsonl
    tune conv2d_nchw --args 1,64,56,56,64,3,3,1,1 --trials 225 --log tuning_logs/$T/conv2d_nchw.jsonl
    tune conv2d_nchw --args 1,64,56,56,128,3,3,2,1 --trials 160 --log tuning_logs/$T/conv2d_nchw.jsonl
    tune conv2d_nchw --args 1,64,56,56,128,3,3,2,1 --trials 215 --tuner random --confirm 0 \
      --log tuning_logs/$T/conv2d_nchw.jsonl
    tune conv2d_nchw --args 1,64,56,56,128,3,3,2,1 --trials 250 --log tuning_logs/$T/conv2d_nchw.jsonl
    tune depthwise_conv2d_nchw --args 1,64,56,56,3,3,1,1 --trials 32 \
      --log tuning_logs/$T/depthwise_conv2d_nchw.jsonl
    ;;&
  norm|all)
    tune softmax --args 4096,4096 --trials 64 --log tuning_logs/$T/softmax.jsonl
    tune layernorm --args 4096,4096 --trials 32 --log tuning_logs/$T/layernorm.jsonl
    tune rmsnorm --args 4096,4096 --trials 32 --log tuning_logs/$T/rmsnorm.jsonl
    ;;
esac
