# Sourced by the GPU benchmark scripts, with $out set: the GPUs here ($gpus), the ranks to run
# ($ranks: RANKS, default the GPUs there are, on one GPU 2 sharing it), and, when ranks share
# GPUs, a CUDA MPS daemon for the run (pipes and logs under $out/mps, stopped at exit), so that
# the sharing ranks' kernels run side by side. Exits 77 without a GPU.
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
((gpus > 0)) || { echo "no GPU here" >&2; exit 77; }
ranks=${RANKS:-$((gpus > 1 ? gpus : 2))}
if ((ranks > gpus)); then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "cannot start CUDA MPS" >&2; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control; sleep 1' EXIT
fi
