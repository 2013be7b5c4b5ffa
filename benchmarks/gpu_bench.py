"""The GPU benchmark: sgatlin's layer and whole training steps on one accelerator, time-boxed, each figure printed as
it comes and written to a JSON file at once.

Run it first whenever a GPU is lent (the project rarely has one), and commit the JSON it writes:

    python benchmarks/gpu_bench.py --out benchmarks/results            # on a GPU: at most 8 minutes, compiles included
    python benchmarks/gpu_bench.py --mini --out /tmp/bench               # the same code at toy sizes on a CPU (CI runs this)

On a lent machine whose image has JAX with CUDA but not every package sgatlin_nb imports, carry the missing wheels:
`bash scripts/device_wheels.sh` writes them into .whl/ here; there, run
`python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_bench.py --out "$OUT"`.

Four parts, in this order, so that a short time box still gives the most important numbers:

1. The layer alone, forward+backward in bfloat16 (parameters float32), at the per-device sizes of the paper's
   rungs s4, s6 and s8 (32,768 tokens, 16 sequences of 2,048): sgatlin with its GPU kernels (the Pallas tile
   kernels of 01a_kernels; interpreted with --mini on a CPU) and with its CPU kernels (chunked loops), the
   authors' formulation (gather the selected rows, two einsums, autodiff), and the SwiGLU of equal forward FLOPs. Variants of one size are timed interleaved (A B C A B C ...), best of
   `--reps`; compare ratios within a run. Per variant: microseconds per token, tokens/s, the fraction of the
   bfloat16 peak its FLOPs use, and for the sparse layers the fraction of the HBM bandwidth that the selected
   rows alone need (6 row-reads or -writes of d_model values per selection: two gathers forward, two
   gathers and two scatters backward), and XLA's temporary bytes.
2. The whole train step on one device at the s6 rung with fewer blocks (`--step-layers`): sgatlin, its SwiGLU
   twin, the MoE and PEER: tokens/s, MFU from the package's FLOP accounting, XLA's memory plan.
3. Attention at the s6 shapes (16 x 2,048 tokens, 12 heads of 64) in bfloat16, forward+backward: cuDNN's fused
   kernel (what the model picks on a GPU) against XLA's, timed side by side, and their largest difference.
4. Determinism: the gradient of sgatlin's loss evaluated twice from the same state, compared bit for bit.
"""
import argparse
import json
import math
import platform
import re
import sys
import time
from pathlib import Path

HBM_BYTES_PER_S = {'H100 PCIe': 2.0e12, 'H100': 3.35e12, 'GH200': 4.0e12, 'H200': 4.8e12, 'B200': 8.0e12,
                   'A100': 2.0e12, 'L40S': 0.86e12, 'L4': 0.3e12}  # a substring of device_kind: memory bandwidth (B/s)
RUNGS = (4, 6, 8)


def spec_for(device_kind: str, table: dict):
    "The value of the longest key of `table` that `device_kind` contains."
    hits = [k for k in table if k in device_kind]
    return table[max(hits, key=len)] if hits else None


def layer_configs(scale: int, mini: bool):
    "sgatlin's FFWConfig at a paper rung (or a toy one) and its SwiGLU twin of equal forward FLOPs."
    from sgatlin_nb.baselines import FFWConfig
    from sgatlin_nb.complexity import ffw_cost
    from sgatlin_nb.scaling import PAPER_LADDER
    if mini:
        sg = FFWConfig('sgatlin', 16 * scale, 9 ** 2, n_channels=2, k=4, d_key=32, dtype='bfloat16')
    else:
        sg = PAPER_LADDER.ffw(scale, 'sgatlin')
        sg = FFWConfig('sgatlin', sg.d_model, sg.d_ffw, n_channels=sg.n_channels, k=sg.k, d_key=sg.d_key, dtype='bfloat16')
    twin = FFWConfig('swiglu', sg.d_model, max(1, round(ffw_cost(sg).flops / (6 * sg.d_model))), dtype='bfloat16')
    return sg, twin


def layer_fns(sg, twin, n_tokens: int):
    "Jitted forward+backward (gradients of every parameter and of x) of each variant, and their inputs."
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from sgatlin_nb.baselines import make_ffw
    from sgatlin_nb.layers import reference_gated_neurons
    x = jax.random.normal(jax.random.key(1), (n_tokens, sg.d_model), jnp.bfloat16)
    ct = jax.random.normal(jax.random.key(2), (n_tokens, sg.d_model), jnp.float32)
    out = {}
    for name, cfg in (('sgatlin', sg), ('sgatlin, CPU kernels', sg), ('authors', sg), ('swiglu twin', twin)):
        graphdef, params = nnx.split(make_ffw(cfg, rngs=nnx.Rngs(0)), nnx.Param)
        def loss(params, x, graphdef=graphdef, name=name):
            m = nnx.merge(graphdef, params)
            if name == 'authors':  # the paper's listing A.1: gather the selected rows, two einsums; autodiff
                g = m.gate(x)
                y = reference_gated_neurons(x, g.scores.astype(x.dtype), g.indices,
                                            m.w_in[...].astype(x.dtype), m.w_out[...].astype(x.dtype))
            else:
                y = m(x)
            return jnp.sum(y.astype(jnp.float32) * ct)
        out[name] = (jax.jit(jax.grad(loss, argnums=(0, 1))), params)
    return out, x


def time_interleaved(fns: dict, args: dict, reps: int, deadline: float) -> dict:
    "Best seconds per call of each function, timed A B C A B C ...; stops early at `deadline` (after one timed round)."
    import jax
    best = dict.fromkeys(fns, float('inf'))
    for r in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args[name]))
            best[name] = min(best[name], time.perf_counter() - t0)
        if time.perf_counter() > deadline and r >= 1: break
    return best


def bench_layers(res: dict, save, mini: bool, reps: int, deadline: float):
    import jax
    from sgatlin_nb.complexity import ffw_cost
    from sgatlin_nb.kernels import use_kernels
    kind = res['device_kind']
    gpu = 'gpu' if res['platform'] == 'gpu' else 'interpret'  # the GPU kernels: compiled by Triton, or interpreted
    peak, hbm = res['peak_bf16_flops'], spec_for(kind, HBM_BYTES_PER_S)
    n_tokens = 64 if mini else 16 * 2048
    for scale in RUNGS:
        if time.perf_counter() > deadline:
            res['skipped'].append(f'layer s{scale}: out of time'); save(); continue
        sg, twin = layer_configs(scale, mini)
        fns, x = layer_fns(sg, twin, n_tokens)
        compiled, t_compile = {}, {}
        for name, (fn, params) in fns.items():
            t0 = time.perf_counter()
            try:
                with use_kernels(gpu if name == 'sgatlin' else 'cpu'):  # traced here: the authors' and SwiGLU have no kernels
                    compiled[name] = fn.lower(params, x).compile()
                jax.block_until_ready(compiled[name](params, x))  # a kernel that fails to run fails here, alone
            except Exception as e:  # one failing variant (a kernel a GPU rejects) must not cost the others' figures
                compiled.pop(name, None)
                res['errors'].append(f'layer s{scale} {name}: {type(e).__name__}: {str(e)[:500]}')
                print(f'layer s{scale} {name}: FAILED ({type(e).__name__}; see errors in the JSON)', flush=True)
            t_compile[name] = time.perf_counter() - t0
        if 'swiglu twin' not in compiled:
            save(); continue
        best = time_interleaved(compiled, {n: (fns[n][1], x) for n in compiled}, reps, deadline)
        rows = {}
        for name, s in best.items():
            cfg = twin if name == 'swiglu twin' else sg
            flops = 3 * ffw_cost(cfg).flops * n_tokens  # forward and backward
            row = {'d_model': cfg.d_model, 'd_ffw': cfg.d_ffw, 'tokens': n_tokens, 's': s, 'us_per_token': s / n_tokens * 1e6,
                   'tokens_per_s': n_tokens / s, 'compile_s': t_compile[name],
                   'temp_bytes': compiled[name].memory_analysis().temp_size_in_bytes}
            if peak: row['flops_fraction'] = flops / s / peak
            if cfg.kind == 'sgatlin' and hbm:
                row['row_bytes_fraction'] = 6 * n_tokens * cfg.n_channels * cfg.k * cfg.d_model * 2 / s / hbm
            rows[name] = row
        for name, row in rows.items():
            row['vs_swiglu'] = row['s'] / rows['swiglu twin']['s']
            print(f"layer s{scale} {name:21s} {row['us_per_token']:9.3f} us/token {row['tokens_per_s']:12,.0f} tokens/s "
                  f"x{row['vs_swiglu']:.2f} of SwiGLU" + (f"  {row['flops_fraction']:.1%} of peak" if 'flops_fraction' in row else '')
                  + (f"  {row['row_bytes_fraction']:.1%} of HBM for the rows" if 'row_bytes_fraction' in row else ''), flush=True)
        res['layer'][f's{scale}'] = rows
        save()


def bench_steps(res: dict, save, mini: bool, layers: int, steps: int, deadline: float):
    import jax
    from sgatlin_nb.gpu import equal_flops_swiglu, paper_presets
    from sgatlin_nb.distributed import make_mesh
    presets = dict(paper_presets(scales=(6,)))
    base = {'sgatlin': presets['sgatlin-s6'], 'swiglu twin': equal_flops_swiglu(presets['sgatlin-s6']),
            'moe': presets['moe-s6'], 'peer': presets['peer-s6']}
    mesh = make_mesh(jax.local_devices()[:1])
    for name, cfg in base.items():
        if time.perf_counter() > deadline:
            res['skipped'].append(f'step {name}: out of time'); save(); continue
        try:
            step_row(res, name, cfg, mini, layers, steps, deadline, mesh)
        except Exception as e:
            res['errors'].append(f'step {name}: {type(e).__name__}: {str(e)[:500]}')
            print(f'step {name}: FAILED ({type(e).__name__}; see errors in the JSON)', flush=True)
        save()


def step_row(res: dict, name: str, cfg, mini: bool, layers: int, steps: int, deadline: float, mesh):
    "Compile and time the train step of `cfg` (shrunk), and write its row into `res['step']`."
    import jax
    import numpy as np
    from sgatlin_nb.complexity import model_flops
    from sgatlin_nb.configs import make_config, miniature_config
    from sgatlin_nb.distributed import shard_batch
    from sgatlin_nb.train import init_state, make_train_step, state_shardings
    cfg = miniature_config(cfg) if mini else make_config(cfg, {'model.n_layers': layers, 'batch_size': 16})
    graphdef, state, tx = init_state(cfg)
    sh = state_shardings(state, mesh, False)
    state = jax.device_put(state, sh)
    fn = make_train_step(graphdef, tx, cfg.grad_accum, sh, mesh, cfg.model.dtype)
    tokens = np.random.default_rng(0).integers(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.seq_len + 1))
    batch = shard_batch(tokens.astype(np.int32), mesh)
    t0 = time.perf_counter()
    compiled = fn.lower(state, batch).compile()
    t_compile = time.perf_counter() - t0
    state, m = compiled(state, batch)
    jax.block_until_ready(m)
    t0, done = time.perf_counter(), 0
    while done < steps and (done < 2 or time.perf_counter() < deadline):
        state, m = compiled(state, batch)
        done += 1
    jax.block_until_ready(m)
    s = (time.perf_counter() - t0) / done
    mc = cfg.model
    rate = cfg.batch_size * mc.seq_len / s
    row = {'n_layers': mc.n_layers, 'd_model': mc.d_model, 'batch': cfg.batch_size, 'seq_len': mc.seq_len, 'steps': done,
           's_per_step': s, 'tokens_per_s': rate, 'compile_s': t_compile, 'loss': float(m['loss']),
           'xla_temp_bytes': compiled.memory_analysis().temp_size_in_bytes}
    if res['peak_bf16_flops']:
        row['mfu'] = rate * 3 * model_flops(mc.d_model, mc.n_layers, mc.seq_len, mc.vocab_size, mc.ffw, 'full') / res['peak_bf16_flops']
    stats = jax.local_devices()[0].memory_stats() or {}
    if 'peak_bytes_in_use' in stats: row['peak_bytes_so_far'] = stats['peak_bytes_in_use']
    res['step'][name] = row
    print(f"step {name:12s} {rate:12,.0f} tokens/s" + (f"  MFU {row['mfu']:.1%}" if 'mfu' in row else '')
          + f"  ({done} steps, compile {t_compile:.0f} s)", flush=True)


def bench_attention(res: dict, save, mini: bool, reps: int, deadline: float):
    import jax
    import jax.numpy as jnp
    from sgatlin_nb.model import attention_backend
    B, T, H, E = (2, 64, 2, 64) if mini else (16, 2048, 12, 64)
    q, k, v = (jax.random.normal(jax.random.key(i), (B, T, H, E), jnp.bfloat16) for i in range(3))
    impls = ['xla'] + (['cudnn'] if attention_backend(jnp.bfloat16, E) == 'cudnn' else [])
    def fwd_bwd(impl):
        f = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        return jax.jit(lambda q, k, v: (f(q, k, v), jax.grad(lambda *a: jnp.sum(f(*a).astype(jnp.float32) ** 2), argnums=(0, 1, 2))(q, k, v)))
    fns = {}
    for impl in impls:
        try: fns[impl] = fwd_bwd(impl).lower(q, k, v).compile()
        except Exception as e: res['skipped'].append(f'attention {impl}: {type(e).__name__}: {str(e)[:200]}')
    best = time_interleaved(fns, {i: (q, k, v) for i in fns}, reps, deadline)
    out = {impl: {'s': t, 'tokens_per_s': B * T / t} for impl, t in best.items()}
    if len(fns) == 2:
        a, b = (jax.tree.leaves(fns[i](q, k, v)) for i in ('xla', 'cudnn'))
        out['largest_difference'] = max(float(jnp.abs(x.astype(jnp.float32) - y.astype(jnp.float32)).max()) for x, y in zip(a, b))
        out['cudnn_vs_xla'] = best['cudnn'] / best['xla']
    res['attention'] = out
    print('attention ' + ', '.join(f"{i} {r['tokens_per_s']:,.0f} tokens/s" for i, r in out.items() if isinstance(r, dict))
          + (f"; cuDNN/XLA time x{out['cudnn_vs_xla']:.2f}, largest difference {out['largest_difference']:.2e}" if 'cudnn_vs_xla' in out else
             ' (no cuDNN on this platform)'), flush=True)
    save()


def bench_determinism(res: dict, save, mini: bool):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from sgatlin_nb.gpu import paper_presets
    from sgatlin_nb.configs import make_config, miniature_config
    from sgatlin_nb.distributed import make_mesh, param_specs
    from sgatlin_nb.train import data_parallel_grads, init_state, state_shardings
    cfg = dict(paper_presets(kinds=('sgatlin',), scales=(6,)))['sgatlin-s6']
    cfg = miniature_config(cfg) if mini else make_config(cfg, {'model.n_layers': 2, 'batch_size': 8})
    graphdef, state, _ = init_state(cfg)
    mesh = make_mesh(jax.local_devices()[:1])
    grads = jax.jit(data_parallel_grads(graphdef, mesh, param_specs(state_shardings(state['params'], mesh, False))))
    batch = jnp.asarray(np.random.default_rng(0).integers(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.seq_len + 1)), jnp.int32)
    a, b = (jax.tree.leaves(grads(state['params'], batch)) for _ in range(2))
    differ = sum(int(np.any(np.asarray(x) != np.asarray(y))) for x, y in zip(a, b))
    res['determinism'] = {'arrays': len(a), 'arrays_differing': differ, 'bit_identical': differ == 0}
    print(f"two gradient evaluations: {differ} of {len(a)} arrays differ ({'bit-identical' if differ == 0 else 'NOT bit-identical'})", flush=True)
    save()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', required=True, help='folder for the JSON file (named after the device)')
    p.add_argument('--budget-s', type=float, default=480, help='time box, compiles included (default 480 s)')
    p.add_argument('--mini', action='store_true', help='toy sizes: the same code on a CPU in about a minute')
    p.add_argument('--reps', type=int, default=10, help='timed calls per variant and size')
    p.add_argument('--step-layers', type=int, default=4, help='blocks of the whole-step models (s6 rung)')
    p.add_argument('--steps', type=int, default=10, help='timed steps per model')
    a = p.parse_args(argv)
    t_start = time.perf_counter()
    deadline = t_start + a.budget_s * 0.9  # the last figure may run over a little
    import jax
    import jaxlib
    from sgatlin_nb.distributed import peak_flops
    dev = jax.local_devices()[0]
    res = {'device_kind': dev.device_kind, 'platform': dev.platform, 'jax': jax.__version__, 'jaxlib': jaxlib.__version__,
           'python': platform.python_version(), 'mini': a.mini, 'budget_s': a.budget_s, 'reps': a.reps,
           'peak_bf16_flops': peak_flops(dev.device_kind), 'hbm_bytes_per_s': spec_for(dev.device_kind, HBM_BYTES_PER_S),
           'kernels': 'sgatlin and PEER: GPU kernels (Pallas tiles) on a GPU, interpreted in the layer part with --mini; CPU kernels otherwise',
           'layer': {}, 'step': {}, 'skipped': [], 'errors': []}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu_bench_{re.sub(r'[^a-z0-9]+', '_', dev.device_kind.lower()).strip('_')}{'_mini' if a.mini else ''}.json"
    def save():
        res['elapsed_s'] = time.perf_counter() - t_start
        path.write_text(json.dumps(res, indent=1))
    print(f"{dev.device_kind} ({dev.platform}), jax {jax.__version__}; writing {path}", flush=True)
    save()
    bench_layers(res, save, a.mini, a.reps, deadline)
    bench_steps(res, save, a.mini, a.step_layers, a.steps, deadline)
    for part, run in (('attention', lambda: bench_attention(res, save, a.mini, a.reps, deadline)),
                      ('determinism', lambda: bench_determinism(res, save, a.mini))):
        if time.perf_counter() > deadline:
            res['skipped'].append(f'{part}: out of time'); continue
        try: run()
        except Exception as e:
            res['errors'].append(f'{part}: {type(e).__name__}: {str(e)[:500]}')
            print(f'{part}: FAILED ({type(e).__name__}; see errors in the JSON)', flush=True)
    save()
    print(f"done in {res['elapsed_s']:.0f} s" + (f"; skipped: {', '.join(res['skipped'])}" if res['skipped'] else '')
          + (f"; {len(res['errors'])} part(s) failed" if res['errors'] else ''))
    return res


if __name__ == '__main__':
    main()
