# Issue 6 round 38, call 4: the new GPU test case of round 38's 8 warps for 32-row blocks up to batch 4; then, on an
# H200, the MLA half of next_h200.sh (the standing table); on an H100, the K2.6 one-GPU slice (4 layers, 3 of them
# MoE; T = 1 and 2 at 4K and 32K) under the current kernels and under round 19's (commit 2498102, exported to .old/
# and carried: mkdir .old && git archive 2498102 ddtree_jax custom_calls benchmarks configs | tar -x -C .old), to
# see rounds 20-38 end to end on one card. Trimmed to fit ~360 s of device time.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu "tests/test_kernels_mla.py::test_gpu_kernel[2-4-8-16384]" \
  > $OUT/t1.log 2>&1; echo "t1 rc $?"; tail -1 $OUT/t1.log
if grep -q H200 $OUT/gpu.txt; then
  mkdir -p $OUT/mla; timeout 170 env PYTHONPATH=. OUT=$OUT/mla python3 benchmarks/kernels.py --only mla --mla-no-sweep \
    --budget 160 --device-span 12 \
    --mla-shapes "1,1,8,131072;8,1,8,32768;1,1,8,32768;1,1,64,32768;1,1,8,8192;1,1,8,1024;1,4,8,32768" > $OUT/mla.log 2>&1
  echo "mla rc $?"; grep -E "copy|mla B=" $OUT/mla.log | cut -c1-500; exit
fi
mkdir -p $OUT/new $OUT/old
timeout 100 env PYTHONPATH=. OUT=$OUT/new python3 benchmarks/k26_slice.py --impls pallas --budgets 1 \
  --xla_budgets 0 --reps 10 --budget_s 75 > $OUT/new.log 2>&1; echo "new rc $?"; grep "pallas (" $OUT/new.log | cut -c1-200
cd .old && timeout 100 env PYTHONPATH=. OUT=$OUT/old python3 benchmarks/k26_slice.py --impls pallas --budgets 1 \
  --xla_budgets 0 --reps 10 --budget_s 75 > $OUT/old.log 2>&1; echo "old rc $?"; grep "pallas (" $OUT/old.log | cut -c1-200
