#!/usr/bin/env bash
# The device check, run on a GPU machine from the bundle `make gpu-check`
# builds (no Go needed there): every CUDA kernel against the CPU
# implementation, the engine against the CPU engine, a GRPO step's sampling
# and training timed for the default model and Qwen2.5-Coder-0.5B's shape,
# each stage a GPU user runs (warm start step, eval sampling, LoRA GRPO
# step) for those and Qwen2.5-Coder-1.5B's shape with the memory plan's
# count beside what the device holds, then PyTorch/transformers on the same
# work. Results in $OUT (default ./out), summary.md first. About 6-9
# minutes on an H200.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 SWETUI_GPU=1 SWETUI_OUT="$OUT"

# cuBLAS and NVRTC come with PyTorch's NVIDIA wheels; NVRTC also needs its
# builtins library on the loader's path.
libs=$(python3 - <<'PY'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = set()
for r in roots:
    for p in glob.glob(os.path.join(r, "nvidia", "**", "*.so*"), recursive=True):
        dirs.add(os.path.dirname(p))
print(":".join(sorted(dirs)))
PY
)
export SWETUI_CUDA_LIBS="$libs"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ nvidia-smi; echo; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } >"$OUT/env.txt" 2>&1

# Each part on its own, so that a crash in one keeps the others' results.
: >"$OUT/go.log"
for run in 'TestGPUKernelsMatchCPU' 'TestGPUEngineMatchesCPU' 'TestGPUSampleTurnKeepsItsCache' 'TestGPUBenchGRPO' 'TestGPUBenchStages'; do
  echo "=== $run" >>"$OUT/go.log"
  timeout 330 ./cuda.test -test.run "^$run\$" -test.v -test.timeout 320s >>"$OUT/go.log" 2>&1
  echo "=== $run exit $?" >>"$OUT/go.log"
done
# The same work in PyTorch: the GRPO step and sampling for the two models
# TestGPUBenchGRPO runs, then (--stages) the warm start step and the LoRA
# GRPO step for the three TestGPUBenchStages runs.
timeout 420 python3 torch_bench.py --out "$OUT/torch.json" --G "${SWETUI_BENCH_G:-8}" \
  --prompt "${SWETUI_BENCH_PROMPT:-512}" --new "${SWETUI_BENCH_NEW:-256}" --stages \
  default-model.json qwen2.5-coder-0.5b.json qwen2.5-coder-1.5b.json >"$OUT/torch.log" 2>&1
echo "torch exit $?" >>"$OUT/torch.log"
python3 summarize.py "$OUT" >"$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
grep -E '^(=== |--- |FAIL|ok|PASS)|Error|error' "$OUT/go.log" | head -60
