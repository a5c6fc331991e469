# Issue 6 round 38, call 4: the marked MLA Triton GPU tests with round 38's 8 warps for 32-row blocks up to batch 4
# (new case (2, 4, 8, 16384)); then, on an H200, next_h200.sh (the standing table); on an H100, the K2.6 one-GPU
# slice (4 layers, 3 of them MoE; T = 1, 2, 9 at 4K and 32K) under the current kernels and under round 19's
# (commit 2498102, exported to .old/ and carried), in the same process order each, to see rounds 20-38 end to end.
mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py > $OUT/t1.log 2>&1
echo "t1 rc $?"; tail -2 $OUT/t1.log
if grep -q H200 $OUT/gpu.txt; then bash benchmarks/results/issue6_r38/next_h200.sh; exit; fi
mkdir -p $OUT/new $OUT/old
timeout 130 env PYTHONPATH=. OUT=$OUT/new python3 benchmarks/k26_slice.py --impls pallas --budgets 1,8 \
  --xla_budgets 0 --reps 10 --budget_s 100 > $OUT/new.log 2>&1; echo "new rc $?"; grep "pallas (" $OUT/new.log | cut -c1-200
cd .old && timeout 130 env PYTHONPATH=. OUT=$OUT/old python3 benchmarks/k26_slice.py --impls pallas --budgets 1,8 \
  --xla_budgets 0 --reps 10 --budget_s 100 > $OUT/old.log 2>&1; echo "old rc $?"; grep "pallas (" $OUT/old.log | cut -c1-200
