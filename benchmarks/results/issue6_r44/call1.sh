# Issue 6 round 44, call 1 (timeout 600). The standing table under the current dispatch on whichever card starts
# (gpu.txt says which): round 38's next_h200.sh, the MLA decode grid of round 19's table and the MoE at 1-64 tokens,
# each with the copy roofline measured in the same run. On an H200 it is the first timing since round 19; on an
# H100 it is the first single run of the whole table since the dispatch changes of rounds 40-41.
bash benchmarks/results/issue6_r38/next_h200.sh
