"""Compile and run the Mosaic GPU MLA kernel once (1 x 257 x 8 heads x 4K, 4 splits) so that the MOSAIC_GPU_DUMP_*
variables of the caller dump its PTX / SASS / ptxas report (issue 6 eighth round, where do the spills sit)."""
import argparse
import sys

sys.path.insert(0, "tests")
from test_kernels_mla_mosaic import SCALE, make_inputs, mla_attention_mosaic, reference_f32, rel_err  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--schedule", default="base")
ap.add_argument("--partial_dtype", default="float32")
a = ap.parse_args()
args = make_inputs(3, 1, 257, 8, 4096)
out = mla_attention_mosaic(*args, scale=SCALE, schedule=a.schedule, partial_dtype=a.partial_dtype)
print(f"schedule {a.schedule} partial {a.partial_dtype}: rel_err {rel_err(out, reference_f32(args)):.2e}")
