# Issue 6, round 17 (session 22), after call3.sh: the decode shapes of the grid under the final dispatch
# (new default splits of both MLA kernels), the dispatch only, for the fraction-of-roofline table.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 270 env PYTHONPATH=. OUT=$OUT python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 230 \
  --mla-shapes "1,1,8,8192;1,1,64,8192;1,1,8,1024;1,1,64,1024;1,1,8,32768;1,1,64,32768;8,1,8,32768;1,1,8,131072;1,1,64,131072" \
  > $OUT/mla.log 2>&1
grep -E "copy|mla B=|skipped" $OUT/mla.log | cut -c1-400
