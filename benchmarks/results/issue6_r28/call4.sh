# Issue 6, round 28 (session 33), call 4 (the last ~120 s of device time): the dispatch (routed_experts_int4, impl
# auto) at the new 2-3 token default on k-chunked 256 experts of the K2.6 shard, against the XLA reference in f32.
# Output of the run: "2 rel err 0.0021679967176169157 nonzero rows 2"; the 3-token case was cut by the timeout.
mkdir -p $OUT; timeout 110 env PYTHONPATH=. python3 -c "
import jax, jax.numpy as jnp
from custom_calls.moe_int4 import routed_experts_int4, experts_to_k_chunks
from custom_calls.random_inputs import random_int4_experts
from custom_calls.moe_int4.reference import routed_experts_int4_reference as ref
e,d,i=48,7168,2048
for n in (2,3):
  ks=jax.random.split(jax.random.PRNGKey(300+n),9)
  st=random_int4_experts(ks[:6],e,d,i)
  x=jax.random.normal(ks[6],(n,d),jnp.bfloat16); ids=jax.random.randint(ks[7],(n,8),0,96); w=jax.random.uniform(ks[8],(n,8))
  out=jax.jit(lambda xx: routed_experts_int4(xx,ids,w,*experts_to_k_chunks(st,256),expert_offset=0))(x).astype(jnp.float32)
  r=ref(x.astype(jnp.float32),ids,w,*st,expert_offset=0)
  print(n, 'rel err', float(jnp.linalg.norm(out-r)/jnp.linalg.norm(r)), 'nonzero rows', int((jnp.abs(r).sum(1)>0).sum()))
" 2>&1 | grep -v Warn | tail -4
