# Issue 6, round 36, call 6: the decode's new one-wave splits (default_num_splits at 16-row blocks) with 3 stages,
# against the splits and 2 stages of the old default, which are given explicitly. Timeout 400.
#  1. the marked MLA GPU tests (now 1 x 8 x 32K and 1 x 8 x 8K run the new defaults);
#  2. 8 x 32K and 4 x 32K (old: 64 splits), 8 x 8K (old: 17), 1 x 128K (old: 256) at 8 heads, 1 token.
mkdir -p $OUT/a $OUT/b $OUT/c; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla.py 2>&1 | tail -2
timeout 130 env PYTHONPATH=. OUT=$OUT/a python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 115 \
  --device-span 12 --mla-shapes "8,1,8,32768;4,1,8,32768" --mla-configs '[{"num_splits": 64, "num_stages": 2}]' \
  > $OUT/a.log 2>&1
echo "a rc $?"; grep -E "copy|mla B=" $OUT/a.log | cut -c1-600
timeout 75 env PYTHONPATH=. OUT=$OUT/b python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 65 \
  --device-span 12 --mla-shapes "1,1,8,131072" --mla-configs '[{"num_splits": 256, "num_stages": 2}]' > $OUT/b.log 2>&1
echo "b rc $?"; grep -E "copy|mla B=" $OUT/b.log | cut -c1-600
timeout 75 env PYTHONPATH=. OUT=$OUT/c python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 65 \
  --device-span 12 --mla-shapes "8,1,8,8192" --mla-configs '[{"num_splits": 17, "num_stages": 2}]' > $OUT/c.log 2>&1
echo "c rc $?"; grep -E "copy|mla B=" $OUT/c.log | cut -c1-600
