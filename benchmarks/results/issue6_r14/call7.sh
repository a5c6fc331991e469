# Issue 6 fourteenth round, GPU call 7: what the device runs in a DDTree round of the embedded model (K = 8, XLA
# defaults): one traced generation (first prompt, 128 tokens, ~27 rounds), the device's kernels by name over the
# trace (count, total us), to see which of the ~100 kernels a round are worth fusing away.
set -x
timeout 200 env PYTHONPATH=. python3 benchmarks/engine_rounds.py --num_prompts 1 --max_new_tokens 128 --reps 1 \
  --runs "ddtree:32,ar:1" --rounds_per_call 8 --trace_dir /tmp/tr --out $OUT/engine_rounds.json > $OUT/engine_rounds.log 2>&1
grep -E "N=|Error|error" $OUT/engine_rounds.log | cut -c1-250
for r in ddtree_32 ar_1; do
  python3 benchmarks/xplane_timeline.py /tmp/tr/${r}_k8.xplane.pb --by_name --top 80 > $OUT/${r}_k8.device_by_name.txt 2>&1
  python3 benchmarks/xplane_timeline.py /tmp/tr/${r}_k8.xplane.pb --gap_us 100000 --top 5 > $OUT/${r}_k8.device.txt 2>&1
done
head -40 $OUT/ddtree_32_k8.device_by_name.txt | cut -c1-120
cat $OUT/ddtree_32_k8.device.txt | cut -c1-200
