"""Compile and run the Mosaic GPU MLA kernel once (1 x 257 x 8 heads x 4K, 4 splits) so that the MOSAIC_GPU_DUMP_*
variables of the caller dump its PTX / SASS / ptxas report (issue 6 eighth round: where do the spills sit).
--interpret: a CPU dry run of this script (Mosaic GPU interpret mode, a smaller context)."""
import argparse
import sys

import jax

from custom_calls.mla_attention.mosaic_gpu import reserve_cpu_threads_for_interpret

sys.path.insert(0, "tests")
from test_kernels_mla_mosaic import SCALE, make_inputs, mla_attention_mosaic, reference_f32, rel_err  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--partial_dtype", default="bfloat16")
ap.add_argument("--interpret", action="store_true")
a = ap.parse_args()
if a.interpret:
  reserve_cpu_threads_for_interpret()     # before the CPU client starts (make_inputs below)
args = make_inputs(3, 1, 257 if not a.interpret else 9, 8, 4096 if not a.interpret else 256)
out = jax.block_until_ready(mla_attention_mosaic(*args, scale=SCALE, partial_dtype=a.partial_dtype,
                                                 interpret=a.interpret))
print(f"partial {a.partial_dtype}: rel_err {rel_err(out, reference_f32(args)):.2e}")
