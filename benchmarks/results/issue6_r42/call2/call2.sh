# Issue 6 round 42, call 2 (typed as one command line on the warm H100 of call 1; saved as run): the dispatch against
# Mosaic at 64 rows in the batch, 8K-12K keys, the one-token and tree forms.
mkdir -p $OUT/t; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt; timeout 200 env PYTHONPATH=. OUT=$OUT/t python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 190 --device-span 12 --mla-shapes "1,1,64,12288;1,1,64,8192;1,8,8,8192;1,4,16,12288" --mla-configs '[{"kernel": "mosaic"}]' > $OUT/t.log 2>&1; echo "timing rc $?"; grep -E "copy|mla B=" $OUT/t.log | cut -c1-900
