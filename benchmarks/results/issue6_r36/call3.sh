# Issue 6, round 36, call 3 (run inline on the warm machine; this file is that command): the one-launch gemv at
# 3 tokens again (second run), stored and k-chunked; 3-stage and 32-key-block decode configs at 4K-128K.
mkdir -p $OUT/dec $OUT/three; nvidia-smi --query-gpu=name --format=csv | tee $OUT/gpu.txt
timeout 200 env PYTHONPATH=. OUT=$OUT/three python3 benchmarks/kernels.py --only moe --no-baselines --device-span 12 --moe-rows 3 --budget 180 --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv_pipelined", "k_chunk": 256}, {"kernel": "gemv_pipelined"}]' > $OUT/three.log 2>&1
echo "three rc $?"; grep -E "copy|  moe M=" $OUT/three.log | cut -c1-300
timeout 300 env PYTHONPATH=. OUT=$OUT/dec python3 benchmarks/kernels.py --only mla --budget 280 --device-span 12 --mla-shapes "1,1,8,32768;1,1,8,16384;1,1,8,131072;1,1,64,32768;8,1,8,32768;1,1,8,4096" --mla-configs '[{"block_k": 32, "num_stages": 3}, {"block_k": 32, "num_stages": 4}, {"num_stages": 3}, {"block_k": 16, "num_stages": 3}]' > $OUT/dec.log 2>&1
echo "dec rc $?"; grep -E "copy|mla B=" $OUT/dec.log | cut -c1-1500
