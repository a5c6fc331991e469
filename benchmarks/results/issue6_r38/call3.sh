# Issue 6 round 38, call 3 (run inline; saved here): the Mosaic spill test with the child's preallocation off (it
# failed in call 1 with CUDA_ERROR_OUT_OF_MEMORY: the parent pytest process held 75% of the card), and 8 warps against
# 4 for 32-row decode (4 tokens x 8 heads) at batches 1-8, each 8-warp config twice.
mkdir -p $OUT/w8; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_mla_mosaic.py::test_gpu_kernel_does_not_spill > $OUT/spill.log 2>&1; echo "spill rc $?"; tail -2 $OUT/spill.log
timeout 200 env PYTHONPATH=. OUT=$OUT/w8 python3 benchmarks/kernels.py --only mla --mla-no-sweep --budget 190 --device-span 12 --mla-shapes "1,4,8,32768;1,4,8,131072;2,4,8,65536;4,4,8,32768;2,4,8,16384;2,4,8,32768;4,4,8,16384;8,4,8,16384" --mla-configs '[{"num_warps": 8}, {"num_warps": 4}, {"num_warps": 8}]' > $OUT/w8.log 2>&1; echo "w8 rc $?"; grep -E "copy|mla B=" $OUT/w8.log | cut -c1-900
