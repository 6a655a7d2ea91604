#!/usr/bin/env bash
# The rest of issue 7's matrix, one device call each (about 9 minutes of the
# 10-minute limit: the bench build is ~100 s on a fresh machine). Usage, from
# the device tool with carry [".deps", ".whl"]:
#   bash bench/run_issue7.sh CELL
# CELL: 350m-2gpu | 350m-1gpu | 1.3b-2048-2gpu | llama-1gpu | llama-2gpu-peers | ctas
#       | check-2gpu (the ZeRO GPU tests on 2 GPUs, then gpt2-1.3b ZeRO 0-3 vs compiled DDP)
#       | 1.3b-2gpu (ZeRO 0-3 vs DDP eager/compiled, compiled FSDP2, DeepSpeed ZeRO-3)
#       | 1.3b-1gpu (micro 8, 16 and 32 vs torch eager and compiled, on the two chips at once)
#       | 1gpu-fill (gpt2-1.3b micro 16 and 32, llama-1b seq 2048 micro 8, vs compiled torch)
#       | final (GPU tests on 2 GPUs; gpt2-1.3b ZeRO 0-2 vs compiled DDP; one GPU at micro 16 and 32)
#       | scaling (gpt2-1.3b ZeRO-2 micro 8 on one GPU: the 1 -> 2 GPU efficiency's base)
#       | z3-350m (gpt2-1.3b ZeRO-3, also with re-gathered layers, vs compiled FSDP2; gpt2-350m ZeRO 0-3 vs compiled DDP, FSDP2)
#       | s12-last (the scaling base and gpt2-350m on one GPU each; gpt2-1.3b seq 2048 ZeRO 1, 3 vs compiled DDP, FSDP2)
#       | s12-profile (gpt2-350m traced vs compiled torch; llama-1b and gpt2-1.3b at seq 2048 on one GPU vs compiled torch)
#       | fused-profile (the fused-kernel tests; gpt2-350m and llama-1b traced vs compiled torch)
#       | s13-final (fused-kernel and ZeRO GPU tests; gpt2-350m ZeRO 0-1 and gpt2-1.3b ZeRO 0, 1, 3 vs compiled DDP)
#       | widen-hooks (ZeRO GPU tests; gpt2-1.3b ZeRO 0-2 vs compiled DDP, for branch wip/widen-in-hooks)
#       | s14-norm (Adam/ZeRO GPU tests; the Adam's bandwidth vs a copy; gpt2-1.3b ZeRO 0-2 vs compiled DDP)
#       | s14-fill (ZeRO GPU tests; gpt2-350m ZeRO 0-2 vs compiled DDP; gpt2-1.3b ZeRO-3 vs compiled FSDP2)
#       | s14-last (ZeRO GPU tests; llama-1b seq 2048 ZeRO 0, 2 vs compiled DDP; DeepSpeed ZeRO-1/2 on gpt2-1.3b)
#       | llama-peers (llama-1b seq 2048 on 2 GPUs: eager FSDP2, DeepSpeed ZeRO-1/2/3, with Stratum ZeRO 1-3)
#       | row-grads (ZeRO GPU tests; llama-1b ZeRO 0-1 (and ZeRO-0 untied) and gpt2-1.3b ZeRO-0 with and without sparse_gradients)
#       | row-grads-2 (gpt2-1.3b ZeRO 0-1 with and without sparse_gradients vs compiled DDP; llama-1b compiled DDP)
#       | fusion-peers (ZeRO GPU tests; gpt2-1.3b ZeRO 0-1 and llama-1b ZeRO-0 vs compiled DDP, with the fusion)
#       | fusion-stage2 (branch wip/fusion-stage2: ZeRO GPU tests; ZeRO 0-2 with the fusion vs compiled DDP; ZeRO-2 without)
#       | nccl-knobs (gpt2-1.3b ZeRO-0 under NCCL_MIN_CTAS 32, NCCL_PROTO Simple / LL128, default twice; ZeRO-2 with and without the fusion)
#       | fusion-stage3 (branch wip/fusion-stage3: ZeRO GPU tests; ZeRO-3 with and without the fusion, gpt2-1.3b and llama-1b, vs compiled FSDP2)
#       | mlp-recompute (FusedOps GPU tests, ZeRO GPU suites; gpt2-1.3b ZeRO 3 and 0 vs compiled FSDP2, then with
#       |   recompute_mlp_activation off; llama-1b ZeRO-2 with it on and off)
#       | matrix-rest (the cells no call had run: llama-1b seq 1024 on 2 GPUs (ZeRO 0-3 vs compiled DDP and FSDP2)
#       |   and on 1 GPU, gpt2-350m seq 2048 on 1 GPU, each vs compiled torch; gpt2-1.3b ZeRO-3 with
#       |   recompute_mlp_activation vs compiled FSDP2)
#       | s17-last (gpt2-1.3b seq 2048 ZeRO 0-3 vs compiled DDP and FSDP2; gpt2-1.3b ZeRO-3 with
#       |   recompute_mlp_activation vs compiled FSDP2)
#       | z3-next (branch wip/fusion-stage3, one call: ZeRO GPU tests; gpt2-1.3b ZeRO-3 fused, unfused and at max_live 8e8/6e8/4e8, llama-1b ZeRO-3 fused and unfused, each vs compiled FSDP2)
#       | z3-live (gpt2-1.3b ZeRO-3 with stage3_max_live_parameters 1e9 (default), 8e8, 6e8, 4e8 vs compiled FSDP2: the speed at FSDP2's memory)
#       | 350m-2048 (gpt2-350m at seq 2048, positions grown to 2048 on both sides: ZeRO 2, 3 vs compiled DDP)
#       | 350m-2048-01 (the same cell at ZeRO 0 and 1)
#       | 350m-2048-profile (gpt2-350m seq 2048 on one GPU traced, Stratum vs compiled torch; not run yet)
#       | s18-check (FusedOps GPU tests, zero3_np2|engine_np2, then 350m-2048-profile)
#       | s18-pad (the logits' gradient read in place: gpt2-350m seq 2048 vs compiled torch and DDP; gpt2-1.3b ZeRO 0-1)
#       | s18-epilogue (GELU in cuBLASLt epilogues: GPU tests; gpt2-350m seq 2048 and gpt2-1.3b ZeRO 0-1 vs compiled DDP)
#       | s18-ab (gpt2-350m seq 2048 traced; gpt2-1.3b ZeRO 0-1 with STRATUM_GEMM_EPILOGUES 1 and 0)
#       | s18-final (GELU forward epilogue: gpt2-1.3b ZeRO 0-2 vs compiled DDP, ZeRO-0 without it; gpt2-350m seq 2048
#       |   ZeRO 0-1 vs compiled DDP; gpt2-1.3b ZeRO-3 vs compiled FSDP2)
#       | s18-z3 (zero3_np2|engine_np2; gpt2-1.3b ZeRO-3 recomputing the MLP activation vs compiled FSDP2)
#       | s18-first (350m-2048-profile, then gpt2-1.3b seq 2048 ZeRO-3 recomputing vs compiled FSDP2; not run yet)
#       | z3-final (ZeRO-3 vs compiled FSDP2 on gpt2-1.3b and llama-1b, the current code)
#       | s16-first (SDPA backends' attention timed during the build; ZeRO GPU tests; gpt2-1.3b ZeRO 0-2, llama-1b ZeRO 0, 2 vs compiled DDP)
#       | wgrad-fusion (ZeRO-3 suite on GPUs; gpt2-1.3b and llama-1b ZeRO 0-1 with and without gradient_accumulation_fusion)
#       | llama-fsdp2 (llama-1b seq 2048 on 2 GPUs: Stratum ZeRO-3 vs eager and compiled FSDP2)
#       | llama-ds (llama-1b seq 2048 on 2 GPUs: Stratum ZeRO 1-3 vs DeepSpeed ZeRO-1/2/3)
#       | zero0-sparse (ZeRO-0 with and without sparse_gradients vs compiled DDP: llama-1b, gpt2-1.3b)
#       | sparse-profile (gpt2-1.3b ZeRO-0 on 2 GPUs traced with and without sparse_gradients)
#       | mfu-32 (gpt2-1.3b micro 32 on one GPU vs compiled torch: the MFU target)
#       | s13-llama (llama-1b seq 2048 ZeRO 1 and 3 on 2 GPUs vs compiled DDP and FSDP2)
#       | kernels (the nn, models and Adam GPU tests; llama-1b seq 2048 and gpt2-350m on one GPU vs compiled torch)
#       | z3 (GPU tests: ZeRO, collectives, the CUDA kernels; gpt2-1.3b ZeRO-3 and 1 vs compiled FSDP2 and DDP)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
targets="bench_engine stratum-report"
gpu_tests="test_zero3 test_engine test_collectives test_checkpoint"
case "${1:-}" in
  check-2gpu|final) targets="$targets $gpu_tests" ;;
  z3) targets="$targets $gpu_tests test_optim test_nn" ;;
  kernels) targets="$targets test_nn test_models test_optim" ;;
  fused-profile) targets="$targets test_nn test_models" ;;
  s13-final) targets="$targets test_nn test_zero3 test_engine" ;;
  s14-norm) targets="$targets test_zero3 test_engine test_optim bench_adam_bandwidth" ;;
  s14-fill|s14-last) targets="$targets test_zero3 test_engine test_nn test_optim" ;;
  row-grads) targets="$targets test_zero3 test_engine" ;;
  wgrad-fusion) targets="$targets test_zero3" ;;
  fusion-peers|fusion-stage2|fusion-stage3|z3-next|s16-first) targets="$targets test_zero3 test_engine" ;;
  mlp-recompute|s18-check|s18-pad) targets="$targets test_zero3 test_engine test_nn" ;;
  s18-epilogue) targets="$targets test_zero3 test_engine test_nn test_models" ;;
  s18-ab) targets="$targets test_nn" ;;
  s18-final) targets="$targets test_nn test_models" ;;
  s18-z3) targets="$targets test_zero3 test_engine" ;;
  widen-hooks) targets="$targets test_zero3 test_engine" ;;
esac
# Cells that time something on one GPU while the build takes the CPUs.
case "${1:-}" in
  s16-first) python3 bench/attention_backends.py >"$out/attention_backends.txt" 2>&1 & ;;
esac
OUT= bash scripts/device_build.sh --no-tests --targets "$targets" >/tmp/build.log 2>&1 ||
  { tail -30 /tmp/build.log; exit 1; }
m() { STEPS=${STEPS:-8} WARMUP=${WARMUP:-3} timeout "$1" bash bench/run_matrix.sh "${@:2}" build-device "$out"; }
# The GPU cases of these CTest entries (2 ranks: NCCL on both chips), within TIMEOUT seconds.
gpu_tests_np2() {  # TIMEOUT "test_a|test_b"
  (cd build-device && timeout "$1" ctest -R "$2" --output-on-failure --timeout $(($1 - 20)) 2>&1 |
    grep -E -A3 "tests passed|Failed|FAILED|Passed|rror|Failure" | tail -40)
}
# gtest binaries with a filter each ("binary filter"), failures shown in full.
gtests() {
  local t
  for t in "$@"; do
    timeout 90 build-device/bin/${t%% *} --gtest_filter="${t#* }" 2>&1 |
      grep -E -A6 "PASSED|FAILED|SKIPPED|Failure|rror" | head -40
  done
}
case "${1:-}" in
  350m-2gpu) m 420 gpt2-350m 1024 16 2 ;;
  1.3b-2gpu) PEERS="ddp ddp-compile fsdp2-compile ds3" m 460 gpt2-1.3b 1024 8 2 ;;
  final)
    gpu_tests_np2 120 "zero3_np2|engine_np2|collectives_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 200 gpt2-1.3b 1024 8 2
    for micro in 16 32; do STAGES=0 PEERS=single-compile m 120 gpt2-1.3b 1024 $micro 1; done ;;
  z3)
    gpu_tests_np2 120 "zero3_np2|engine_np2|collectives_np2"
    for t in "test_optim *AdamMixed*:*HostAdam*" "test_nn *GpuKernels*:*LinearPadded*"; do
      set -- $t; timeout 60 build-device/bin/$1 --gtest_filter="$2" 2>&1 | grep -E "PASSED|FAILED|SKIPPED" | head -5
    done
    STAGES="3 1" PEERS="fsdp2-compile ddp-compile" m 330 gpt2-1.3b 1024 8 2 ;;
  z3-350m)
    STAGES=3 PEERS="fsdp2-compile" m 200 gpt2-1.3b 1024 8 2
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"stage3_max_reuse_distance":0' m 60 gpt2-1.3b 1024 8 2
    PEERS="ddp-compile fsdp2-compile" m 270 gpt2-350m 1024 16 2 ;;
  s12-last)
    STAGES=2 PEERS="" m 80 gpt2-1.3b 1024 8 1
    STAGES=0 PEERS=single-compile m 130 gpt2-350m 1024 16 1
    STAGES="1 3" PEERS="ddp-compile fsdp2-compile" m 320 gpt2-1.3b 2048 4 2 ;;
  s12-profile)
    timeout 150 bash bench/run_profiles.sh gpt2-350m 1024 16 0 build-device "$out" --compile >"$out/profile_350m.txt" 2>&1
    grep -E "^\{|GPU span|busy|^\| [a-z]" "$out/profile_350m.txt"; rm -f "$out"/*.json.gz
    STAGES=0 PEERS=single-compile m 170 llama-1b 2048 4 1
    STAGES=0 PEERS=single-compile m 130 gpt2-1.3b 2048 4 1 ;;
  kernels)
    gtests "test_nn *Gpu*:*Fused*:*Linear*" "test_models *" "test_optim *AdamMixed*:*HostAdam*"
    STAGES=0 PEERS=single-compile m 170 llama-1b 2048 4 1
    STAGES=0 PEERS=single-compile m 130 gpt2-350m 1024 16 1 ;;
  scaling) STAGES=2 PEERS="" m 90 gpt2-1.3b 1024 8 1 ;;
  1gpu-fill)
    for micro in 16 32; do STAGES=0 PEERS=single-compile m 200 gpt2-1.3b 1024 $micro 1; done
    STAGES=0 PEERS=single-compile m 200 llama-1b 2048 8 1 ;;
  1.3b-1gpu) for micro in 8 16 32; do STAGES=0 m 150 gpt2-1.3b 1024 $micro 1; done ;;
  350m-1gpu) STAGES=0 m 200 gpt2-350m 1024 16 1 ;;
  1.3b-2048-2gpu) PEERS="ddp-compile fsdp2 ds3" m 420 gpt2-1.3b 2048 4 2 ;;
  llama-1gpu) STAGES=0 m 300 llama-1b 2048 4 1 ;;
  llama-2gpu-peers) STAGES="2 3" PEERS="ddp-compile fsdp2-compile ds3" m 420 llama-1b 2048 4 2 ;;
  ctas)  # does capping NCCL's thread blocks leave the backward more SMs? (ZeRO-0 all-reduce, ZeRO-3 gathers)
    for c in 0 8 4; do
      if [ "$c" = 0 ]; then unset NCCL_MAX_CTAS; else export NCCL_MAX_CTAS=$c; fi
      echo "== NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-default}"
      STAGES="0 3" PEERS="" m 120 gpt2-1.3b 1024 8 2
    done
    unset NCCL_MAX_CTAS
    echo "== ZeRO-3, layers re-gathered for backward (stage3_max_reuse_distance 0, FSDP2's reshard_after_forward)"
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"stage3_max_reuse_distance":0' m 70 gpt2-1.3b 1024 8 2 ;;
  fused-profile)
    gtests "test_nn *Fused*:*Linear*" "test_models *"
    timeout 150 bash bench/run_profiles.sh gpt2-350m 1024 16 0 build-device "$out" --compile >"$out/profile_350m.txt" 2>&1
    timeout 200 bash bench/run_profiles.sh llama-1b 2048 4 0 build-device "$out" --compile >"$out/profile_llama.txt" 2>&1
    tail -45 "$out/profile_350m.txt"; grep -A12 "^longest" "$out/profile_llama.txt" ;;
  s13-final)
    gtests "test_nn *Fused*:*Linear*:*Gpu*"
    gpu_tests_np2 140 "zero3_np2|engine_np2"
    STAGES="0 1" PEERS="ddp-compile" m 150 gpt2-350m 1024 16 2
    STAGES="0 1 3" PEERS="ddp-compile" m 170 gpt2-1.3b 1024 8 2 ;;
  widen-hooks)
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 300 gpt2-1.3b 1024 8 2 ;;
  s14-norm)
    gtests "test_optim *AdamMixed*:*HostAdam*"
    timeout 60 build-device/bin/bench_adam_bandwidth
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 230 gpt2-1.3b 1024 8 2 ;;
  s14-fill)
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 200 gpt2-350m 1024 16 2
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2 ;;
  s14-last)
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 2" PEERS="ddp-compile" m 220 llama-1b 2048 4 2
    STAGES="" PEERS="ds1 ds2" m 150 gpt2-1.3b 1024 8 2 ;;
  llama-peers) STAGES="1 2 3" PEERS="fsdp2 ds1 ds2 ds3" m 540 llama-1b 2048 4 2 ;;
  fusion-peers)  # the fused code (and its per-layer opt-in) next to compiled DDP in one call
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1" PEERS="ddp-compile" m 150 gpt2-1.3b 1024 8 2
    STAGES="0" PEERS="ddp-compile" m 130 llama-1b 2048 4 2 ;;
  fusion-stage2)  # branch wip/fusion-stage2: the fusion at stages 0-2 next to compiled DDP, and ZeRO-2 without it
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 170 gpt2-1.3b 1024 8 2
    STAGES=2 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 60 gpt2-1.3b 1024 8 2
    STAGES="0 2" PEERS="ddp-compile" m 150 llama-1b 2048 4 2 ;;
  fusion-stage3)
    gpu_tests_np2 130 "zero3_np2|engine_np2"
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 45 gpt2-1.3b 1024 8 2
    STAGES=3 PEERS="fsdp2-compile" m 170 llama-1b 2048 4 2
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 45 llama-1b 2048 4 2 ;;
  z3-next)
    gpu_tests_np2 130 "zero3_np2|engine_np2"
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 45 gpt2-1.3b 1024 8 2
    for live in 8e8 6e8 4e8; do
      echo "== stage3_max_live_parameters $live"
      STAGES=3 PEERS="" STRATUM_FLAGS="--zero-extra ,\"stage3_max_live_parameters\":$live" m 45 gpt2-1.3b 1024 8 2
    done
    STAGES=3 PEERS="fsdp2-compile" m 170 llama-1b 2048 4 2
    STAGES=3 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 45 llama-1b 2048 4 2 ;;
  mlp-recompute)  # the MLP's activation recomputed in backward or kept (the default)
    gtests "test_nn FusedOps.*"
    gpu_tests_np2 110 "zero3_np2|engine_np2"
    STAGES="3 0" PEERS="fsdp2-compile" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 170 gpt2-1.3b 1024 8 2
    echo "== recompute_mlp_activation=false"
    STAGES="3 0" PEERS="" STRATUM_FLAGS="--set recompute_mlp_activation=false" m 50 gpt2-1.3b 1024 8 2
    STAGES=2 PEERS="" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 30 llama-1b 2048 4 2
    echo "== recompute_mlp_activation=false"
    STAGES=2 PEERS="" STRATUM_FLAGS="--set recompute_mlp_activation=false" m 30 llama-1b 2048 4 2 ;;
  s17-last)  # gpt2-1.3b seq 2048 with the current code; ZeRO-3 at FSDP2's memory again
    STAGES="0 1 2 3" PEERS="ddp-compile fsdp2-compile" m 260 gpt2-1.3b 2048 4 2
    echo "== recompute_mlp_activation=true"
    STAGES=3 PEERS="fsdp2-compile" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 150 gpt2-1.3b 1024 8 2 ;;
  matrix-rest)
    STAGES="0 1 2 3" PEERS="ddp-compile fsdp2-compile" m 240 llama-1b 1024 8 2
    STAGES=0 PEERS="single-compile" m 90 llama-1b 1024 8 1
    STAGES=0 PEERS="single-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 90 gpt2-350m 2048 8 1
    echo "== recompute_mlp_activation=true"
    STAGES=3 PEERS="fsdp2-compile" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 150 gpt2-1.3b 1024 8 2 ;;
  z3-live)  # fewer layers kept gathered from forward to backward: less memory, more re-gathers
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2
    for live in 8e8 6e8 4e8; do
      echo "== stage3_max_live_parameters $live"
      STAGES=3 PEERS="" STRATUM_FLAGS="--zero-extra ,\"stage3_max_live_parameters\":$live" m 45 gpt2-1.3b 1024 8 2
    done ;;
  350m-2048) STAGES="2 3" PEERS="ddp-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 200 gpt2-350m 2048 8 2 ;;
  350m-2048-01) STAGES="0 1" PEERS="ddp-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 150 gpt2-350m 2048 8 2 ;;
  s18-first)  # the last stop's open ends in one call: the seq-2048 profile, recomputing at seq 2048
    STRATUM_FLAGS="--set max_seq_len=2048" timeout 200 bash bench/run_profiles.sh gpt2-350m 2048 8 0 build-device \
      "$out" --compile >"$out/profile_350m_2048.txt" 2>&1
    cat "$out/profile_350m_2048.txt"
    STAGES=3 PEERS="fsdp2-compile" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 170 gpt2-1.3b 2048 4 2 ;;
  s18-check)  # the last stop's CPU-only review commits on GPUs, then the seq-2048 profile
    gtests "test_nn FusedOps.*"
    gpu_tests_np2 110 "zero3_np2|engine_np2"
    STRATUM_FLAGS="--set max_seq_len=2048" timeout 200 bash bench/run_profiles.sh gpt2-350m 2048 8 0 build-device \
      "$out" --compile >"$out/profile_350m_2048.txt" 2>&1
    cat "$out/profile_350m_2048.txt" ;;
  s18-pad)  # the LM head reading the logits' gradient in place (no padded copy); where cuBLASLt lives
    ls -l /usr/local/cuda/include/cublasLt.h /usr/local/cuda/lib64/libcublasLt.so* 2>&1 | head -5
    find / -xdev \( -name 'libcublasLt.so*' -o -name cublasLt.h \) 2>/dev/null | grep -v '^/proc' | head -10
    gtests "test_nn *CrossEntropy*:LinearPadded*"
    STAGES=0 PEERS="single-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 90 gpt2-350m 2048 8 1
    STAGES="0 1" PEERS="ddp-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 150 gpt2-350m 2048 8 2
    STAGES="0 1" PEERS="" m 80 gpt2-1.3b 1024 8 2 ;;
  s18-epilogue)  # GPT-2's GELU in cuBLASLt's epilogues; the LM head's gradient read in place, split at 64 columns
    grep -h "cuBLASLt" /tmp/build.log | head -2
    gtests "test_nn FusedOps.*:LinearPadded*:*CrossEntropy*" "test_models *"
    gpu_tests_np2 110 "zero3_np2|engine_np2"
    STAGES="0 1" PEERS="ddp-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 150 gpt2-350m 2048 8 2
    STAGES="0 1" PEERS="ddp-compile" m 170 gpt2-1.3b 1024 8 2 ;;
  s18-ab)  # the epilogues on and off in one call; gpt2-350m seq 2048 traced with them
    gtests "test_nn FusedOps.*:LinearPadded*"
    STRATUM_FLAGS="--set max_seq_len=2048" timeout 150 bash bench/run_profiles.sh gpt2-350m 2048 8 0 build-device \
      "$out" --compile >"$out/profile_350m_2048.txt" 2>&1
    head -48 "$out/profile_350m_2048.txt"
    for e in 1 0; do
      echo "== STRATUM_GEMM_EPILOGUES=$e"
      STRATUM_GEMM_EPILOGUES=$e STAGES="0 1" PEERS="" m 80 gpt2-1.3b 1024 8 2
    done ;;
  s18-final)  # the forward epilogue only; ZeRO 0-2 vs compiled DDP, gpt2-350m seq 2048, ZeRO-3 vs compiled FSDP2
    gtests "test_nn FusedOps.*:LinearPadded*:*CrossEntropy*" "test_models *"
    STAGES="0 1 2" PEERS="ddp-compile" m 170 gpt2-1.3b 1024 8 2
    echo "== STRATUM_GEMM_EPILOGUES=0"
    STRATUM_GEMM_EPILOGUES=0 STAGES=0 PEERS="" m 40 gpt2-1.3b 1024 8 2
    STAGES="0 1" PEERS="ddp-compile" STRATUM_FLAGS="--set max_seq_len=2048" m 150 gpt2-350m 2048 8 2
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2 ;;
  s18-z3)  # the final code through the ZeRO GPU suites; ZeRO-3 recomputing the MLP's activation vs compiled FSDP2
    gpu_tests_np2 110 "zero3_np2|engine_np2"
    STAGES=3 PEERS="fsdp2-compile" STRATUM_FLAGS="--set recompute_mlp_activation=true" m 160 gpt2-1.3b 1024 8 2 ;;
  350m-2048-profile)  # why seq 2048 gains less: one step of each traced on one GPU, kernels summed
    STRATUM_FLAGS="--set max_seq_len=2048" timeout 200 bash bench/run_profiles.sh gpt2-350m 2048 8 0 build-device \
      "$out" --compile >"$out/profile_350m_2048.txt" 2>&1
    cat "$out/profile_350m_2048.txt" ;;
  z3-final)
    STAGES=3 PEERS="fsdp2-compile" m 150 gpt2-1.3b 1024 8 2
    STAGES=3 PEERS="fsdp2-compile" m 200 llama-1b 2048 4 2 ;;
  nccl-knobs)  # does NCCL's all-reduce slow the backward less with more blocks, or another protocol?
    for knob in default NCCL_MIN_CTAS=32 NCCL_PROTO=Simple NCCL_PROTO=LL128 default; do
      echo "== $knob"
      (if [ "$knob" != default ]; then export "${knob?}"; fi; STAGES=0 PEERS="" m 45 gpt2-1.3b 1024 8 2)
    done
    echo "== ZeRO-2, fused then unfused"
    STAGES=2 PEERS="" m 45 gpt2-1.3b 1024 8 2
    STAGES=2 PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 45 gpt2-1.3b 1024 8 2
    STAGES=2 PEERS="" m 45 gpt2-1.3b 1024 8 2 ;;
  s16-first)
    wait; cat "$out/attention_backends.txt"
    gpu_tests_np2 130 "zero3_np2|engine_np2"
    STAGES="0 1 2" PEERS="ddp-compile" m 170 gpt2-1.3b 1024 8 2
    STAGES="0 2" PEERS="ddp-compile" m 150 llama-1b 2048 4 2 ;;
  wgrad-fusion)
    gpu_tests_np2 120 "zero3_np2"
    STAGES="0 1" PEERS="" m 60 gpt2-1.3b 1024 8 2
    STAGES="0 1" PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 60 gpt2-1.3b 1024 8 2
    STAGES="0 1" PEERS="" m 60 llama-1b 2048 4 2
    STAGES="0 1" PEERS="" STRATUM_FLAGS='--zero-extra ,"gradient_accumulation_fusion":false' m 60 llama-1b 2048 4 2 ;;
  llama-fsdp2) STAGES=3 PEERS="fsdp2 fsdp2-compile" m 330 llama-1b 2048 4 2 ;;
  llama-ds) STAGES="1 2 3" PEERS="ds1 ds2 ds3" m 430 llama-1b 2048 4 2 ;;
  zero0-sparse)
    STAGES=0 PEERS="ddp-compile" m 130 llama-1b 2048 4 2
    STAGES=0 PEERS="" STRATUM_FLAGS=--sparse-gradients m 60 llama-1b 2048 4 2
    STAGES=0 PEERS="ddp-compile" m 120 gpt2-1.3b 1024 8 2
    STAGES=0 PEERS="" STRATUM_FLAGS=--sparse-gradients m 60 gpt2-1.3b 1024 8 2 ;;
  row-grads)
    gtests "test_zero3 *ScatterKernel*:*WireWidening*"
    gpu_tests_np2 150 "zero3_np2|engine_np2"
    STAGES="0 1" PEERS="" m 100 llama-1b 2048 4 2
    STAGES="0 1" PEERS="" STRATUM_FLAGS=--sparse-gradients m 100 llama-1b 2048 4 2
    echo "== untied embeddings"
    STAGES=0 PEERS="" STRATUM_FLAGS="--set tie_embeddings=false" m 60 llama-1b 2048 4 2
    STAGES=0 PEERS="" STRATUM_FLAGS="--set tie_embeddings=false --sparse-gradients" m 60 llama-1b 2048 4 2
    STAGES=0 PEERS="" m 60 gpt2-1.3b 1024 8 2
    STAGES=0 PEERS="" STRATUM_FLAGS=--sparse-gradients m 60 gpt2-1.3b 1024 8 2 ;;
  row-grads-2)
    STAGES="0 1" PEERS="ddp-compile" m 200 gpt2-1.3b 1024 8 2
    STAGES="0 1" PEERS="" STRATUM_FLAGS=--sparse-gradients m 100 gpt2-1.3b 1024 8 2
    STAGES="" PEERS="ddp-compile" m 120 llama-1b 2048 4 2 ;;
  sparse-profile)  # one traced step each (rank 0): where the end of backward goes with and without rows
    STAGES=0 PEERS="" STRATUM_FLAGS="--profile /tmp/z0_dense.json" m 100 gpt2-1.3b 1024 8 2
    STAGES=0 PEERS="" STRATUM_FLAGS="--sparse-gradients --profile /tmp/z0_sparse.json" m 100 gpt2-1.3b 1024 8 2
    for t in dense sparse; do gzip -c /tmp/z0_$t.json >"$out/trace_gpt2-1.3b_zero0_$t.json.gz"; done ;;
  mfu-32) STAGES=0 PEERS=single-compile m 220 gpt2-1.3b 1024 32 1 ;;
  s13-llama) STAGES="1 3" PEERS="ddp-compile fsdp2-compile" m 300 llama-1b 2048 4 2 ;;
  check-2gpu)
    gpu_tests_np2 240 "zero3_np2|engine_np2|collectives_np2|checkpoint_np2"
    STAGES="0 1 2 3" PEERS="ddp-compile" m 330 gpt2-1.3b 1024 8 2 ;;
  *) echo "run_issue7: unknown cell '${1:-}'" >&2; exit 2 ;;
esac
