# Issue 6 round 37, call 3 (run inline; saved here): the GPU tests of the end-to-end model, tree verify, split combine
# and the MoE dispatch under the round-36 defaults. Result: 28 passed, 67 deselected in 269.69 s (H100).
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_e2e.py tests/test_kernels_tree.py tests/test_mla_split_combine.py tests/test_kernels_moe.py 2>&1 | tail -5
