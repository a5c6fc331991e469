# Issue 6 thirteenth round, GPU call 5: the engine's host cost per round on the embedded default model (bf16).
# benchmarks/run_ahead.py (AR and DDTree N=32, 8 prompts x 128 tokens, batch 1) on
#   head:  the engine of commit 0f07638 (each round returns only the state, read every round), from
#          benchmarks/results/issue6_r13/engine_head.py, which is not kept in the repo: make it first with
#          `git show 0f07638:ddtree_jax/engine.py > benchmarks/results/issue6_r13/engine_head.py` (no git on the device);
#   new:   RoundReport outputs, run-ahead, the compiled-program key worked out once per Engine;
#   new_cb_off: the same with XLA's command buffers off.
# One jax.profiler trace per setting and mode (host and device planes). Everything is tarred into one file.
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mkdir -p /tmp/r && rm -rf /tmp/head && cp -r . /tmp/head && cp benchmarks/results/issue6_r13/engine_head.py /tmp/head/ddtree_jax/engine.py
for setting in head new new_cb_off; do
  dir=.; flags=""
  [ $setting = head ] && dir=/tmp/head
  [ $setting = new_cb_off ] && flags="--xla_gpu_enable_command_buffer="
  (cd $dir && XLA_FLAGS="$flags" timeout 150 env PYTHONPATH=. python3 benchmarks/run_ahead.py --num_prompts 8 \
    --max_new_tokens 128 --reps 2 --runs "ar:1,ddtree:32" --trace_dir /tmp/r/tr_$setting \
    --out /tmp/r/run_ahead_$setting.json > /tmp/r/$setting.log 2>&1)
  echo "== $setting"; grep -E "N=|Error|error" /tmp/r/$setting.log | cut -c1-250
done
for f in /tmp/r/tr_*/*.xplane.pb; do python3 benchmarks/xplane_timeline.py $f --plane /host:CPU --top 40 > $f.host.txt 2>&1; done
cd /tmp/r && tar czf $OUT/call5.tgz *.json *.log tr_*/*.xplane.pb tr_*/*.host.txt && ls -la $OUT
