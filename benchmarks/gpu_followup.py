"""The second GPU window of 2026-11-28 (NVIDIA H200, jax 0.11.2), run as it was: what `gpu_bench.py`'s first window left open.

- Determinism with XLA's attention instead of cuDNN's (the first window found 16 of 26 gradient arrays differing between
  two identical evaluations, all of them upstream of the last block's attention query).
- Determinism and the train step under `XLA_FLAGS=--xla_gpu_deterministic_ops=true` (both failed at execution).
- The s6 train step (4 blocks) of sgatlin and of its SwiGLU twin, each in a process of its own, so that the device's
  `peak_bytes_in_use` is that model's alone (the first window's figure was the process's peak over every model).

On the device: `OUT=folder PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_followup.py` (wheels as in gpu_bench.py).
Results: benchmarks/results/gpu_followup_nvidia_h200.json.

`python benchmarks/gpu_followup.py magnitudes` (on a CPU, about 30 s) adds to that file the scale of what the first window's
kernel comparison compared: the largest output of the CPU kernels on the same inputs (same seeds), and its dtype.
"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
part = sys.argv[1] if len(sys.argv) > 1 else None
if part == 'magnitudes':
    import jax, jax.numpy as jnp
    from flax import nnx
    import benchmarks.gpu_bench as g
    from sgatlin_nb.kernels import chunk_rows, gather_combine, gather_dot, scatter_outer, use_kernels
    from sgatlin_nb.layers import SparselyGatedLinear
    sg, _ = g.layer_configs(6, False)  # the inputs of gpu_bench.bench_kernels, drawn from the same keys
    N, J, D, R = 16 * 2048, sg.n_channels * sg.k, sg.d_model, sg.n_channels * sg.d_ffw
    ks = jax.random.split(jax.random.key(3), 5)
    table, rows = jax.random.normal(ks[0], (R, D), jnp.bfloat16), jax.random.randint(ks[1], (N, J), 0, R)
    v, a = jax.random.normal(ks[2], (N, D), jnp.bfloat16), jax.random.normal(ks[3], (N, J), jnp.float32)
    c = chunk_rows(N, J, D, 2, None)
    outs = {'gather_dot': jax.jit(lambda: gather_dot(table, rows, v, c))(), 'gather_combine': jax.jit(lambda: gather_combine(table, rows, a, c))(),
            'table gradient': jax.jit(lambda: scatter_outer(R, rows, a, v, c, jnp.float32))()}
    layer = SparselyGatedLinear(sg.d_model, sg.d_ffw, sg.n_channels, sg.k, sg.d_key, rngs=nnx.Rngs(0))
    gdef, params = nnx.split(layer, nnx.Param)
    ct = jax.random.normal(ks[4], (N, sg.n_channels, sg.k), jnp.float32)
    with use_kernels('cpu'):
        grads = jax.jit(jax.grad(lambda p, x: jnp.sum(nnx.merge(gdef, p).gate(x).scores * ct)))(params, v)
    outs['gate backward'] = max((x for x in jax.tree.leaves(grads)), key=lambda x: float(jnp.abs(x).max()))
    mags = {k: {'largest_output': float(jnp.abs(x.astype(jnp.float32)).max()), 'dtype': str(x.dtype)} for k, x in outs.items()}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results', 'gpu_followup_nvidia_h200.json')
    res = json.load(open(path))
    res['cpu_magnitudes'] = {'what': 'largest |output| of the CPU kernels on bench_kernels\' inputs (for the gate, its largest gradient), computed on a CPU', **mags}
    open(path, 'w').write(json.dumps(res, indent=1))
    print(json.dumps(mags))
    sys.exit()
OUT = os.environ['OUT']
if part is None:
    for p, flags in (('det_xla_attention', ''), ('det_flag', '--xla_gpu_deterministic_ops=true'), ('step_sgatlin', ''), ('step_swiglu twin', ''), ('step_sgatlin_detflag', '--xla_gpu_deterministic_ops=true')):
        env = dict(os.environ, XLA_FLAGS=flags)
        t = time.time()
        try: r = subprocess.run([sys.executable, __file__, p], env=env, timeout=150)
        except subprocess.TimeoutExpired: print(p, 'TIMEOUT', flush=True)
        print(f'== {p} {time.time() - t:.0f} s', flush=True)
    sys.exit()
import sgatlin_nb.kernels
import jax
import benchmarks.gpu_bench as g
from sgatlin_nb.distributed import peak_flops
dev = jax.local_devices()[0]
res = {'device_kind': dev.device_kind, 'peak_bf16_flops': peak_flops(dev.device_kind), 'step': {}, 'skipped': [], 'errors': [],
       'xla_flags': os.environ.get('XLA_FLAGS', ''), 'part': part}
path = f"{OUT}/{part.replace(' ', '_')}.json"
save = lambda: open(path, 'w').write(json.dumps(res, indent=1))
deadline = time.perf_counter() + 100
if part.startswith('det'):
    from sgatlin_nb.model import use_attention
    if part == 'det_xla_attention':
        with use_attention('xla'): g.bench_determinism(res, save, False)
    else: g.bench_determinism(res, save, False)
else:
    from sgatlin_nb.gpu import equal_flops_swiglu, paper_presets
    from sgatlin_nb.distributed import make_mesh
    presets = dict(paper_presets(scales=(6,)))
    name = part.split('_')[1]
    cfg = equal_flops_swiglu(presets['sgatlin-s6']) if name == 'swiglu twin' else presets['sgatlin-s6']
    g.step_row(res, name, cfg, False, 4, 10, deadline, make_mesh(jax.local_devices()[:1]))
save()
