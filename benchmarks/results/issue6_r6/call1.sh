set -x
# (run 1 of this script passed it: 6 passed) timeout 100 python3 -m pytest -q -m gpu tests/test_kernels_moe.py -k "gemv_tc_x_in_kernel or gemv_tensor_cores" > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
mkdir -p $OUT/moe $OUT/mla
OUT=$OUT/moe timeout 330 env PYTHONPATH=. python3 benchmarks/kernels.py --only moe --moe-rows 1,2,4,8,16,32,64 --moe-kernels gemv,default,grouped --moe-max-configs 8 --no-baselines --budget 290 > $OUT/moe/moe.log 2>&1
tail -4 $OUT/moe/moe.log
OUT=$OUT/mla timeout 200 env PYTHONPATH=. python3 benchmarks/kernels.py --only mla --mla-shapes "1,1,8,131072;1,1,64,131072;8,1,8,32768;1,1,8,32768" --budget 160 > $OUT/mla/mla.log 2>&1
tail -8 $OUT/mla/mla.log
cat $OUT/moe/kernels_table.md
