# Issue 6, round 25 (session 30), call 2: call 1's XLA reads were not on the harness's chain (the same reduction
# for calls sharing an input set was merged: faster than the copy roofline), now they are (their index or scale
# depends on x). Repeats one token with the first read config, the 8K / 32K decode, then 2 tokens.
mkdir -p $OUT; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 420 env PYTHONPATH=. python3 benchmarks/speed_of_light.py --moe_tokens 1,2 --moe_configs 1 \
  --mla_ctx 8192,32768 --out $OUT/speed_of_light.json > $OUT/sol.log 2>&1
echo "rc $?"; grep -E "copy|moe|mla|^\|" $OUT/sol.log | cut -c1-400 | tail -40
