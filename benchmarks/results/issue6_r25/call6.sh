# Issue 6, round 25 (session 30), call 6 (run as one command line; recorded here): call 5 timed the dispatch on the
# stored layout, where the grouped kernels (8 tokens and up) are slow. The engine gives the kernels k-chunked experts
# on a GPU (KERNEL_K_CHUNK 256), so: the dispatch and the gemv at 8 and 10 tokens on k-chunked experts.
mkdir -p $OUT/kc; timeout 110 env PYTHONPATH=. OUT=$OUT/kc python3 benchmarks/kernels.py --only moe --moe-rows 8,10 --no-baselines --moe-configs '[{"kernel": "default", "k_chunk": 256}, {"kernel": "gemv", "k_chunk": 256}]' --budget 100 > $OUT/kc.log 2>&1; grep -E "copy|  moe M=" $OUT/kc.log | cut -c1-300
