# Issue 6 fourteenth round, GPU call 4: the grouped INT4 MoE kernels at 8-16 tokens (the DDTree N=8 verify's ~10
# local pairs a layer), k-chunked: warps and pipeline stages. The SASS of the gate/up kernel (sass_report.py, 8
# tokens, 4 warps, 3 stages: 80 registers, 34.8 KB of shared memory, cp.async loads, 423 instructions a K step)
# and its grid (512 programs, ~4 per SM = 16 warps) point at too few warps to hide the dequantisation's
# dependency chains, so: 8 warps, and 2 / 4 / 5 stages, against the defaults (4 warps, 3 stages).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
C='[{"kernel": "grouped", "k_chunk": 256}, {"kernel": "grouped", "k_chunk": 256, "num_warps": 8},
 {"kernel": "grouped", "k_chunk": 256, "num_stages": 2}, {"kernel": "grouped", "k_chunk": 256, "num_stages": 4},
 {"kernel": "grouped", "k_chunk": 256, "num_stages": 5},
 {"kernel": "grouped", "k_chunk": 256, "num_warps": 8, "num_stages": 4},
 {"kernel": "grouped", "k_chunk": 256, "num_warps": 8, "num_warps_down": 4},
 {"kernel": "grouped", "k_chunk": 256, "block_n": 64, "num_warps": 8}]'
mkdir -p $OUT/moe
timeout 300 env PYTHONPATH=. OUT=$OUT/moe python3 benchmarks/kernels.py --only moe --moe-rows 8,12,16 \
  --no-baselines --moe-configs "$C" --budget 280 > $OUT/moe.log 2>&1
grep -E "copy|moe M=" $OUT/moe.log | cut -c1-100
python3 - <<'PY'
import json, os
d = json.load(open(os.path.join(os.environ["OUT"], "moe", "kernels.json")))
for r in d.get("moe", []):
  print(r.get("M"), r.get("experts_hit"), [(c.get("cfg"), round(c.get("time_s", 0) * 1e6, 1)) for c in r.get("configs", [])])
PY
