"""The GPU profile: what one lent GPU window should measure about sgatlin's training step, old and new designs side by
side, every figure written to a JSON file as it comes.

    python benchmarks/gpu_profile.py --out benchmarks/results     # on one GPU: at most 9 minutes, compiles included
    python benchmarks/gpu_profile.py --mini --out /tmp/profile     # the same code at toy sizes on a CPU (CI runs this)

On a lent machine without every package sgatlin_nb imports, carry the wheels as for gpu_bench.py (its docstring).

Parts, most important first (a short time box keeps the first):

1. Versions and the device.
2. The 4-block `s6` training step (16 x 2,048 tokens of real text, one device, parameters replicated, as gpu_bench.py
   timed it) in four designs, timed interleaved step by step: 'sgatlin' (today: the gate kept by `remat_policy`,
   `bfloat16` rows on one device, the `gpu` tile kernels), 'sgatlin, wide kernels' (the same with `gpu-wide`),
   'sgatlin, as timed' (the design the H200 timed at 30851f6: the gate replayed, float32 tables, restored here by
   patching two names) and 'swiglu twin'; then 'sgatlin' and 'sgatlin, wide kernels' once more (3 steps each, `--profile-steps`) under
   `jax.profiler`, the trace reduced here to the total time of each device kernel (the JSON keeps the totals, not
   the trace).
3. The sparse kernels alone at s6's per-device sizes: `gather_dot`, `gather_combine` (the `gpu` and `gpu-wide`
   tiles) and the table gradient (its wide form, which no design uses yet, and its ahead form, which `gpu-wide` runs), on uniform random rows and on channel-structured rows (each channel's choices
   drawn from a Zipf law over its own rows, as real text concentrates them), with `bfloat16` and float32 tables.
4. Depth: 'sgatlin' and 'swiglu twin' at 2 and 12 blocks (with part 2's 4 blocks: a slope per block and an
   intercept, and the whole `sgatlin-s6` at 12).
5. Decoding with the key-value cache: tokens per second at batch 1 and 64 for sgatlin, the twin and the MoE.

6. The cost model's predictions of the step designs and the kernels alone (92_gpu: fitted to the H200's committed
   figures, priced at this device's bandwidth), beside the measurements; left to 92_gpu where `triton` is missing.
"""
import argparse
import contextlib
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import real_tokens, run_parts, start_result, time_interleaved  # noqa: E402

STEP_DESIGNS = ('sgatlin', 'sgatlin, wide kernels', 'sgatlin, as timed', 'swiglu twin')



@contextlib.contextmanager
def as_timed():
    "The step as the H200 timed it (commit 30851f6): each block's gate replayed in the backward pass, and on one device the tables read in float32 (only sharded weights were cast)."
    import sgatlin_nb.distributed as distributed
    import sgatlin_nb.model as model
    saved = model.remat_policy, distributed.COMPUTE_DTYPE_PARAMS
    model.remat_policy = lambda: None                   # jax.checkpoint's default policy: keep nothing, replay the block
    distributed.COMPUTE_DTYPE_PARAMS = frozenset()      # one device, nothing sharded: nothing was cast
    try: yield
    finally: model.remat_policy, distributed.COMPUTE_DTYPE_PARAMS = saved


def design(name: str, gpu: bool):
    "The kernels and patches a step design is traced with."
    from sgatlin_nb.kernels import use_kernels
    wide = name.endswith('wide kernels')
    stack = contextlib.ExitStack()
    stack.enter_context(use_kernels(('gpu' if gpu else 'interpret') + ('-wide' if wide else '')))
    if name.endswith('as timed'): stack.enter_context(as_timed())
    return stack


def step_config(name: str, mini: bool, layers: int):
    from sgatlin_nb.configs import make_config, miniature_config
    from sgatlin_nb.gpu import equal_flops_swiglu, paper_presets
    presets = dict(paper_presets(scales=(6,)))
    base = {'swiglu twin': equal_flops_swiglu(presets['sgatlin-s6']), 'moe': presets['moe-s6']}.get(name, presets['sgatlin-s6'])
    if mini: return make_config(miniature_config(base), {'model.n_layers': min(layers, 2), 'batch_size': 2, 'model.remat': True})
    return make_config(base, {'model.n_layers': layers, 'batch_size': 16})


_BUILT = {}  # (design, blocks) -> [config, compiled step, its current state, batch, compile seconds]: each compiled once


def compiled_step(name: str, mini: bool, layers: int, gpu: bool):
    "The compiled training step of a design, its state (the latest: the step donates it) and a batch of real text."
    if (name, layers) in _BUILT: return _BUILT[(name, layers)]
    import jax
    import numpy as np
    from sgatlin_nb.distributed import make_mesh, shard_batch
    from sgatlin_nb.train import init_state, make_train_step, state_shardings
    cfg = step_config(name, mini, layers)
    mesh = make_mesh(jax.local_devices()[:1])
    graphdef, state, tx = init_state(cfg)
    sh = state_shardings(state, mesh, False)
    state = jax.device_put(state, sh)
    tokens = real_tokens(cfg.batch_size * (cfg.model.seq_len + 1)) % cfg.model.vocab_size
    batch = shard_batch(tokens.reshape(cfg.batch_size, cfg.model.seq_len + 1).astype(np.int32), mesh)
    t0 = time.perf_counter()
    with design(name, gpu):
        fn = make_train_step(graphdef, tx, cfg.grad_accum, sh, mesh, cfg.model.dtype).lower(state, batch).compile()
    _BUILT[(name, layers)] = [cfg, fn, state, batch, time.perf_counter() - t0]
    return _BUILT[(name, layers)]


def bench_steps(res, save, a, gpu, deadline, names=STEP_DESIGNS, layers=None, key='step'):
    "Time the designs' steps interleaved (one step of each in turn), each from its own state."
    import jax
    from sgatlin_nb.complexity import model_flops
    layers = layers or a.step_layers
    built = {}
    for name in names:
        if time.perf_counter() > deadline: res['skipped'].append(f'{key} {name}: out of time'); continue
        try: built[name] = compiled_step(name, a.mini, layers, gpu)
        except Exception as e: res['errors'].append(f'{key} {name}: {type(e).__name__}: {str(e)[:400]}')
    best, loss = dict.fromkeys(built, float('inf')), {}
    for r in range(a.steps + 1):  # the first round warms up
        for name, b in built.items():
            t0 = time.perf_counter()
            b[2], metrics = b[1](b[2], b[3])
            jax.block_until_ready(metrics)
            if r: best[name] = min(best[name], time.perf_counter() - t0)
            loss[name] = float(metrics['loss'])
        if time.perf_counter() > deadline and r >= 2: break
    out = res.setdefault(key, {})
    for name, (cfg, fn, state, batch, t_compile) in built.items():
        m = cfg.model
        rate = cfg.batch_size * m.seq_len / best[name]
        out[name] = {'n_layers': m.n_layers, 'd_model': m.d_model, 'tokens': cfg.batch_size * m.seq_len, 's_per_step': best[name],
                     'tokens_per_s': rate, 'compile_s': t_compile, 'loss': loss.get(name),
                     'mfu': rate * 3 * model_flops(m.d_model, m.n_layers, m.seq_len, m.vocab_size, m.ffw, 'full') / res['peak_bf16_flops']
                     if res['peak_bf16_flops'] else 'not on a GPU'}
        print(f"{key} {name:24s} {1e3 * best[name]:9.2f} ms/step  {rate:12,.0f} tokens/s  ({m.n_layers} blocks, compile {t_compile:.0f} s)", flush=True)
    if 'swiglu twin' in out:
        for r in out.values(): r['vs_twin'] = r['s_per_step'] / out['swiglu twin']['s_per_step']
    save()


def kernel_totals(trace_dir: str, top: int = 40) -> dict:
    "The total microseconds and count of each event name on the device streams of a jax.profiler trace (all events on a CPU)."
    path = next(Path(trace_dir).rglob('perfetto_trace.json.gz'))
    events = json.load(gzip.open(path))
    events = events['traceEvents'] if isinstance(events, dict) else events
    procs = {e['pid']: e['args']['name'] for e in events if e.get('ph') == 'M' and e.get('name') == 'process_name'}
    device = {p for p, n in procs.items() if 'GPU' in n or 'gpu' in n}
    totals = {}
    for e in events:
        if e.get('ph') == 'X' and (not device or e.get('pid') in device):
            t = totals.setdefault(e['name'], [0.0, 0])
            t[0] += e.get('dur', 0.0); t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return {'device_streams': sorted(procs[p] for p in device) or 'none (all events)', 'events': len(events),
            'total_us': sum(v[0] for v in totals.values()),
            'kernels': [{'name': n[:200], 'us': round(us, 3), 'count': c} for n, (us, c) in ranked[:top]]}


def profile_steps(res, save, a, gpu, deadline):
    "`a.profile_steps` steps (default 3) of each new design under jax.profiler, reduced to per-kernel totals."
    import jax
    for name in ('sgatlin', 'sgatlin, wide kernels'):
        if time.perf_counter() > deadline: res['skipped'].append(f'profile {name}: out of time'); continue
        b = compiled_step(name, a.mini, a.step_layers, gpu)  # compiled and warm from part 2
        with tempfile.TemporaryDirectory() as d:
            with jax.profiler.trace(d, create_perfetto_trace=True):
                for _ in range(a.profile_steps):
                    b[2], m = b[1](b[2], b[3])
                jax.block_until_ready(m)
            res.setdefault('profile', {})[name] = kernel_totals(d) | {'steps': a.profile_steps}
        top = res['profile'][name]['kernels'][:3]
        print(f"profile {name:24s} " + ', '.join(f"{k['name'][:40]} {k['us'] / a.profile_steps:,.0f} us/step" for k in top), flush=True)
        save()


def structured_rows(key, n: int, j: int, n_channels: int, per_channel: int, alpha: float = 1.1):
    "Row ids `[n, j]` as a channel-structured layer chooses them: selection `s` belongs to channel `s // (j / n_channels)`, whose choices follow a Zipf law of exponent `alpha` over its own `per_channel` rows (in a fixed random order)."
    import jax
    import jax.numpy as jnp
    k1, k2 = jax.random.split(key)
    p = 1.0 / jnp.arange(1, per_channel + 1) ** alpha
    ranks = jax.random.choice(k1, per_channel, (n, j), p=p / p.sum())
    order = jax.random.permutation(k2, per_channel)
    channel = jnp.arange(j) // (j // n_channels)
    return (order[ranks] + channel * per_channel).astype(jnp.int32)


def bench_kernels(res, save, a, gpu, deadline):
    "The sparse kernels alone: tile kernels old and wide, uniform and channel-structured rows, bfloat16 and float32 tables."
    import jax
    import jax.numpy as jnp
    from sgatlin_nb.kernels import gather_combine, gather_dot, scatter_outer, sorted_scatter_outer
    from gpu_bench import layer_configs
    sg, _ = layer_configs(6, a.mini)
    N = 64 if a.mini else 16 * 2048
    J, D, C, F = sg.n_channels * sg.k, sg.d_model, sg.n_channels, sg.d_ffw
    ks = jax.random.split(jax.random.key(5), 5)
    rows = {'uniform': jax.random.randint(ks[0], (N, J), 0, C * F).astype(jnp.int32),
            'structured': structured_rows(ks[1], N, J, C, F)}
    v, coef = jax.random.normal(ks[2], (N, D), jnp.bfloat16), jax.random.normal(ks[3], (N, J), jnp.float32)
    tables = {dt: jax.random.normal(ks[4], (C * F, D), dt) for dt in (jnp.bfloat16, jnp.float32)}
    kind = 'gpu' if gpu else 'interpret'
    hbm, out = res['hbm_bytes_per_s'], res.setdefault('kernels', {})
    out['rows'] = {n: {'distinct': int(jnp.unique(r).size), 'selections': N * J} for n, r in rows.items()}
    for rname, r in rows.items():
        for dt, t in tables.items():
            if time.perf_counter() > deadline: res['skipped'].append(f'kernels {rname} {dt.__name__}: out of time'); continue
            row_bytes = N * J * D * jnp.dtype(dt).itemsize
            fns = {f'gather_dot {k}': jax.jit(lambda t, r, v, c, k=k: gather_dot(t, r, v, k)) for k in (kind, kind + '-wide')}
            fns |= {f'gather_combine {k}': jax.jit(lambda t, r, v, c, k=k: gather_combine(t, r, c, k)) for k in (kind, kind + '-wide')}
            fns['table gradient'] = jax.jit(lambda t, r, v, c: scatter_outer(C * F, r, c, v, kind, jnp.float32))
            fns['table gradient, wide'] = jax.jit(lambda t, r, v, c: sorted_scatter_outer(C * F, r, c, v, jnp.float32, interpret=not gpu, wide=True))
            fns['table gradient, ahead'] = jax.jit(lambda t, r, v, c: sorted_scatter_outer(C * F, r, c, v, jnp.float32, interpret=not gpu, ahead=True))
            args = dict.fromkeys(fns, (t, r, v, coef))
            outs = {n: f(*args[n]) for n, f in fns.items()}
            for base, old, new in (('gather_dot', f'gather_dot {kind}', f'gather_dot {kind}-wide'),  # the wide kernels give the same sums
                                   ('gather_combine', f'gather_combine {kind}', f'gather_combine {kind}-wide'),
                                   ('table gradient', 'table gradient', 'table gradient, wide'),
                                   ('table gradient ahead', 'table gradient', 'table gradient, ahead')):
                x, y = outs[old].astype(jnp.float32), outs[new].astype(jnp.float32)
                out.setdefault('wide_vs_tiles', {})[f'{base} {rname} {jnp.dtype(dt).name}'] = float(jnp.abs(x - y).max() / jnp.abs(x).max())
            best = time_interleaved(fns, args, a.reps, deadline)
            for n, s in best.items():
                out[f'{n}, {rname} rows, {jnp.dtype(dt).name} table'] = {
                    'us': s * 1e6, 'row_gb_per_s': row_bytes / s / 1e9,
                    'hbm_fraction': row_bytes / s / hbm if hbm and gpu else 'not on a GPU'}
            print(f"kernels {rname} rows, {jnp.dtype(dt).name} table: " +
                  ', '.join(f"{n} {s * 1e6:,.0f} us" for n, s in best.items()), flush=True)
            save()


def bench_decode(res, save, a, gpu, deadline):
    "Tokens per second of cached greedy decoding at batch 1 and 64 (64 new tokens after a 64-token prompt)."
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from sgatlin_nb.model import Transformer, generate
    out = res.setdefault('decode', {})
    n_prompt, n_new = (4, 4) if a.mini else (64, 64)
    for name in ('sgatlin', 'swiglu twin', 'moe'):
        cfg = step_config(name, a.mini, a.step_layers)
        model = Transformer(cfg.model, rngs=nnx.Rngs(0))
        with design(name, gpu):
            for batch in (1, 64):
                if time.perf_counter() > deadline: res['skipped'].append(f'decode {name} {batch}: out of time'); continue
                prompt = jnp.asarray(real_tokens(batch * n_prompt) % cfg.model.vocab_size, jnp.int32).reshape(batch, n_prompt)
                jax.block_until_ready(generate(model, prompt, n_new))  # compiles
                t0 = time.perf_counter()
                jax.block_until_ready(generate(model, prompt, n_new))
                s = time.perf_counter() - t0
                out[f'{name}, batch {batch}'] = {'tokens_per_s': batch * n_new / s, 's': s, 'n_layers': cfg.model.n_layers}
                print(f"decode {name:12s} batch {batch:3d}: {batch * n_new / s:12,.0f} tokens/s", flush=True)
        save()
    for batch in (1, 64):
        twin = out.get(f'swiglu twin, batch {batch}')
        for n in ('sgatlin', 'moe'):
            if twin and f'{n}, batch {batch}' in out:
                out[f'{n}, batch {batch}']['vs_twin'] = twin['tokens_per_s'] / out[f'{n}, batch {batch}']['tokens_per_s']


def bench_predictions(res, save, a):
    "The cost model of 92_gpu, fitted to the committed H200 figures, priced at this device's bandwidth: each step design of this run (its dense work from this run's twin, in the H200's proportion) and each kernel alone at s6's sizes. Needs the `triton` package (to read the kernels' registers); without it the predictions are left to 92_gpu."
    from sgatlin_nb.gpu import (adamw_bytes, calibration_figures, figure_seconds, fit_cost_model, kernel_bench_inventory,
                                read_timed_inventories, sparse_seconds, step_inventory)
    root = Path(__file__).resolve().parents[1]
    bench = json.loads((root / 'benchmarks' / 'results' / 'gpu_bench_nvidia_h200.json').read_text())
    before = read_timed_inventories(root / 'nbs' / 'results' / 'cost_inventory_30851f6.json')
    try:
        figures = calibration_figures(bench, before)
    except RuntimeError as e:  # no triton here
        res['predicted'] = f'not made here ({e}); 92_gpu makes them'; return
    theta = fit_cost_model(figures, bench['hbm_bytes_per_s'])
    hbm = res['hbm_bytes_per_s'] or bench['hbm_bytes_per_s']
    dense_share = figures['step sgatlin']['dense_s'] / bench['step']['swiglu twin']['s_per_step']
    out = res['predicted'] = {'theta': theta, 'hbm_bytes_per_s': hbm, 'step': {}, 'kernels': {}}
    twin = res.get('step', {}).get('swiglu twin')
    for name in ('sgatlin', 'sgatlin, wide kernels', 'sgatlin, as timed'):
        cfg = step_config(name, a.mini, a.step_layers)
        with design(name, gpu=True):
            inv = step_inventory(cfg, cfg.model.n_layers, cfg.batch_size, kernels='gpu-wide' if 'wide' in name else 'gpu')
        fig = {'inventory': inv, 'n_gates': cfg.model.n_layers, 'step': True, 'dense_s': dense_share * twin['s_per_step'] if twin else 0.0,
               'adamw_bytes': adamw_bytes(cfg.model.ffw, cfg.model.n_layers)}
        out['step'][name] = {'s_per_step': figure_seconds(theta, fig, hbm), 'sparse_s': sparse_seconds(theta, inv, cfg.model.n_layers, hbm, True),
                             'measured_s': res.get('step', {}).get(name, {}).get('s_per_step')}
    for kernels in ('gpu', 'gpu-wide'):
        for n, inv in kernel_bench_inventory(kernels).items():
            out['kernels'][f'{n} {kernels}'] = sum(sparse_seconds(theta, inv, int(n == 'gate'), hbm).values()) * 1e6
    print('predicted ' + ', '.join(f"{n} {1e3 * r['s_per_step']:.1f} ms" for n, r in out['step'].items()), flush=True)
    save()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', required=True, help='folder for the JSON file (named after the device)')
    p.add_argument('--budget-s', type=float, default=540, help='time box, compiles included (default 540 s)')
    p.add_argument('--mini', action='store_true', help='toy sizes: the same code on a CPU, GPU kernels interpreted')
    p.add_argument('--reps', type=int, default=10, help='timed calls per kernel')
    p.add_argument('--steps', type=int, default=8, help='timed steps per design')
    p.add_argument('--step-layers', type=int, default=4, help='blocks of the step designs (s6 rung)')
    p.add_argument('--profile-steps', type=int, default=3, help='steps traced per design under the profiler')
    a = p.parse_args(argv)
    res, save, deadline = start_result('gpu_profile', a, {})
    gpu = res['platform'] == 'gpu'
    res['kernels_traced'] = 'gpu and gpu-wide' if gpu else 'interpret and interpret-wide (no GPU)'
    return run_parts(res, save, deadline, (
        ('step', lambda: bench_steps(res, save, a, gpu, deadline)),
        ('profile', lambda: profile_steps(res, save, a, gpu, deadline)),
        ('kernels', lambda: bench_kernels(res, save, a, gpu, deadline)),
        ('depth', lambda: [bench_steps(res, save, a, gpu, deadline, ('sgatlin', 'swiglu twin'), layers=n, key=f'depth {n}')
                           for n in ((1,) if a.mini else (2, 12))]),
        ('decode', lambda: bench_decode(res, save, a, gpu, deadline)),
        ('predictions', lambda: bench_predictions(res, save, a))))


if __name__ == '__main__':
    main()
