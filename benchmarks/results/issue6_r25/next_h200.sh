# Issue 6, round 25, prepared for the next session (not run): round 25's speed of light on the issue's machine.
# Calls 2-6 ran on an H100; this repeats call 2 (1-2 tokens, 8K / 32K decode) and the k-chunked dispatch rows of
# call 6 on an H200 (run it with kind nvidia-h200; check gpu.txt for the card that came). ~300 s.
mkdir -p $OUT/sol $OUT/kc; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 240 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --moe_configs 1 \
  --moe_variants read_2,read_1 --mla_ctx 8192,32768 --out $OUT/sol/speed_of_light.json > $OUT/sol.log 2>&1
grep -E "copy|^\|" $OUT/sol.log | cut -c1-400
timeout 110 env PYTHONPATH=. OUT=$OUT/kc python3 benchmarks/kernels.py --only moe --moe-rows 1,2,8 --no-baselines \
  --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}]' --budget 100 \
  > $OUT/kc.log 2>&1
grep -E "copy|  moe M=" $OUT/kc.log | cut -c1-300
