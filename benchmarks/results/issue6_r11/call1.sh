# Issue 6 eleventh round, GPU call 1: the split combine in one launch (split_combine.py) and the mask words in
# one reduction, for the short MLA decode; every kernel of the short-decode and few-token MoE programs timed by ncu.
# Dry runs on the CPU: PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --smoke; tests/test_ncu_programs.py
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
timeout 150 env PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_mla_split_combine.py \
  tests/test_kernels_mla_mosaic.py -k "gpu_matches or dispatch" > $OUT/pytest.log 2>&1
tail -3 $OUT/pytest.log
timeout 260 env PYTHONPATH=. python3 benchmarks/mla_decode_parts.py --out $OUT/mla_decode_parts.json \
  --shapes "1,1,64,1024;1,1,64,8192;1,1,64,32768;1,1,64,131072;1,1,8,8192;1,1,8,32768" > $OUT/parts.log 2>&1
grep "mla B=" $OUT/parts.log
timeout 150 env PYTHONPATH=. ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  --print-units base --log-file $OUT/ncu.csv python3 benchmarks/ncu_programs.py drive \
  --mla "1,1,64,32768;1,1,8,32768" --moe 1,2,8 --programs $OUT/ncu_programs.json > $OUT/ncu_drive.log 2>&1
tail -2 $OUT/ncu_drive.log
python3 benchmarks/ncu_programs.py table $OUT/ncu.csv --programs $OUT/ncu_programs.json > $OUT/ncu_table.md 2>&1
cut -c1-400 $OUT/ncu_table.md
