"""Forward+backward time, temporary and peak memory of the feedforward layers, side by side.

Every variant runs alone in a fresh subprocess, so that its peak resident memory is its own, for
its compile statistics and its train step; then all variants run in one more process, their
forward+backward calls interleaved (A B C A B C ...), which gives the side-by-side times and
ratios. This repeats for `--rounds` rounds; a time is the best of its calls over all rounds. The
machine may be shared: compare ratios from one run, not absolute times across runs. The variants,
at each size:

  naive         sgatlin's gate + the direct gather-einsum neurons (paper, listing A.1), autodiff
  sgatlin       SparselyGatedLinear: chunked custom_vjp kernels, dense table gradients
  sgatlin-rows  the same layer with row-sparse table gradients (taps) and lazy AdamW on the tables
  swiglu, moe, peer   the baselines of sgatlin_nb.baselines
  dense-floor   not a layer: sgatlin's gate forward+backward plus returning two fresh zero tables of the
                table gradients' size, the least any forward+backward with this gate and dense table
                gradients costs (naive/dense-floor bounds how much faster than naive such a layer can be)

FLOPs are the package's own count of one forward pass (sgatlin_nb.complexity.ffw_cost, which the
03_complexity notebook checks against XLA's count); time per FLOP relative to SwiGLU is the
isoflop view. A train step is forward+backward (one jitted call) then the optimizer update (a
second jitted call, parameters and moments donated): AdamW for every variant, except that
sgatlin-rows updates only the touched rows of its tables (`lazy_adamw_rows`).

The 'large' size is beyond the paper: 256² neurons per channel, 16 channels (1M table rows), against 112²
per channel at the ladder's largest rung (200,704 rows). The sweep grows d_ffw from 32² to 256² at fixed C and k, and times the parts apart: the gate
(forward+backward), the neurons with dense and with row-sparse table gradients, returning two
fresh zero tables (the least any dense table gradient costs), AdamW on both tables, and lazy
AdamW on their touched rows.

    python benchmarks/layer_bench.py              # both sizes and the sweep (about 10 minutes on 2 cores)
    python benchmarks/layer_bench.py --quick      # the TinyStories size and a short sweep (about 2 minutes)
    python benchmarks/layer_bench.py --hugepages  # glibc backs large buffers with transparent huge pages

Fresh buffers are page-faulted and zero-filled by the kernel 4 KiB at a time, which at d_ffw = 256²
(1 GiB per table and per table gradient) costs more than the arithmetic; --hugepages starts the
workers with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which makes that far cheaper where transparent
huge pages are enabled (`madvise` or `always` in /sys/kernel/mm/transparent_hugepage/enabled).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

SIZES = {  # d_model, d_ffw, n_channels, k, d_key of the sparse layers; tokens = batch x seq_len
    'tinystories': dict(d_model=256, d_ffw=1024, n_channels=8, k=8, d_key=128),
    'large': dict(d_model=256, d_ffw=256 ** 2, n_channels=16, k=8, d_key=128),  # beyond the paper: 5x the table rows of
}   # its largest sgatlin layer (ladder rung 8: d_model 1024, d_ffw 112^2, C 16); 'tinystories' is the paper's TinyStories layer
VARIANTS = ('naive', 'sgatlin', 'sgatlin-rows', 'swiglu', 'moe', 'peer', 'dense-floor')
TABLES = ('w_in', 'w_out')


def config(variant: str, size: str):
    "The FFWConfig of a variant at a size: SwiGLU 4·d_model wide, MoE as in the paper's ladder (16 experts of d_model, top 2)."
    from sgatlin_nb.baselines import FFWConfig
    s = SIZES[size]
    if variant in ('naive', 'sgatlin', 'sgatlin-rows', 'dense-floor'): return FFWConfig('sgatlin', **s)
    if variant == 'swiglu': return FFWConfig('swiglu', s['d_model'], 4 * s['d_model'])
    if variant == 'moe': return FFWConfig('moe', s['d_model'], s['d_model'])
    if variant == 'peer': return FFWConfig('peer', **s)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def rss_mib() -> float:
    "Resident memory of this process now."
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_ms(fn, reps: int) -> float:
    "Best wall time of `reps` calls of `fn` (which blocks until its result is ready), after one warm-up."
    fn()
    best = float('inf')
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
    return best * 1e3


# ---------------------------------------------------------------- workers (run in subprocesses)

def build(variant: str, size: str, batch: int, seq_len: int, layers: dict):
    "A variant's jitted forward+backward and its arguments; `layers` shares one layer between variants of one config."
    import jax, jax.numpy as jnp
    from flax import nnx
    from sgatlin_nb.baselines import make_ffw
    from sgatlin_nb.layers import reference_gated_neurons
    cfg = config(variant, size)
    if cfg not in layers: layers[cfg] = make_ffw(cfg, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (batch, seq_len, cfg.d_model))
    n_tokens = batch * seq_len
    rows_mode = variant == 'sgatlin-rows'
    is_table = lambda path, _: path[-1] in TABLES
    floor = variant == 'dense-floor'
    graphdef, tables, rest = nnx.split(layers[cfg], is_table if rows_mode or floor else nnx.Nothing, nnx.Param)

    def output(m, x, taps=None):
        if variant == 'naive':
            g = m.gate(x)
            C, k = m.n_channels, m.k
            y = reference_gated_neurons(x.reshape(-1, m.d_model), g.scores.reshape(-1, C, k),
                                        g.indices.reshape(-1, C, k), m.w_in[...], m.w_out[...])
            return y.reshape(x.shape), g
        if rows_mode:
            g = m.gate(x)
            return m.apply_gates(x, g, taps), g
        return m(x), None

    def fwd_bwd(rest, tables, x):
        "Gradients of 0.5·|y|² with respect to the parameters and the input (and the touched rows)."
        if floor:  # the gate's gradients, and zeros where the tables' dense gradients would be
            gate_loss = lambda rest, x: jnp.sum(nnx.merge(graphdef, tables, rest).gate(x).scores ** 2)
            d_rest, dx = jax.grad(gate_loss, argnums=(0, 1))(rest, x)
            return (d_rest, jax.tree.map(jnp.zeros_like, tables), dx), None
        def loss(rest, taps, x):
            y, g = output(nnx.merge(graphdef, tables, rest), x, taps)
            return 0.5 * jnp.sum(y.astype(jnp.float32) ** 2), g
        taps = nnx.merge(graphdef, tables, rest).row_taps(n_tokens) if rows_mode else None
        grads, g = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(rest, taps, x)
        touched = nnx.merge(graphdef, tables, rest).touched(g).rows if rows_mode else None
        return grads, touched
    return dict(fb=jax.jit(fwd_bwd), rest=rest, tables=tables, x=x, cfg=cfg, rows_mode=rows_mode, n_tokens=n_tokens)


def compare_worker(variants: list, size: str, batch: int, seq_len: int, reps: int) -> dict:
    "Forward+backward of several variants timed interleaved in one process (A B C A B C ...): side-by-side times."
    import jax
    layers = {}
    built = {v: build(v, size, batch, seq_len, layers) for v in variants}
    runs = {v: (lambda b=b: jax.block_until_ready(b['fb'](b['rest'], b['tables'], b['x']))) for v, b in built.items()}
    for run in runs.values(): run()  # compile and warm up
    best = dict.fromkeys(runs, float('inf'))
    for _ in range(reps):
        for v, run in runs.items():
            t0 = time.perf_counter(); run(); best[v] = min(best[v], time.perf_counter() - t0)
    return {v: t * 1e3 for v, t in best.items()}


def layer_worker(variant: str, size: str, batch: int, seq_len: int, reps: int, steps: bool) -> dict:
    "Measure one variant alone: compile stats, forward+backward time, peak memory, optionally a train step."
    import jax, jax.numpy as jnp, optax
    from sgatlin_nb.complexity import ffw_cost
    from sgatlin_nb.kernels import lazy_adamw_rows
    b = build(variant, size, batch, seq_len, {})
    fb, rest, tables, x, rows_mode = b['fb'], b['rest'], b['tables'], b['x'], b['rows_mode']
    base = rss_mib()
    temp = fb.lower(rest, tables, x).compile().memory_analysis().temp_size_in_bytes
    run = lambda: jax.block_until_ready(fb(rest, tables, x))
    out = dict(variant=variant, size=size, fwd_bwd_alone_ms=best_ms(run, reps), temp_mib=temp / 2**20,
               gflop=ffw_cost(b['cfg']).flops * b['n_tokens'] / 1e9, rss_base_mib=base, rss_peak_mib=peak_rss_mib())
    if not steps or variant == 'dense-floor': return out

    tx = optax.adamw(1e-3, b1=0.9, b2=0.95, weight_decay=0.1)
    if rows_mode:
        rows_of = lambda t: t.reshape(-1, t.shape[-1])
        def update(rest, tables, opt, grads, touched):
            rest_opt, moments, count = opt
            upd, rest_opt = tx.update(grads[0], rest_opt, rest)
            rest = optax.apply_updates(rest, upd)
            new, count = {}, count + 1
            for name, g_UxD in zip(TABLES, grads[1]):
                p, m, v = lazy_adamw_rows(rows_of(tables[name][...]), *moments[name], touched, g_UxD, count,
                                          learning_rate=1e-3, weight_decay=0.1)
                tables[name][...] = p.reshape(tables[name][...].shape)
                new[name] = (m, v)
            return rest, tables, (rest_opt, new, count)
        zeros = lambda n: jnp.zeros_like(rows_of(tables[n][...]))
        opt = (tx.init(rest), {n: (zeros(n), zeros(n)) for n in TABLES}, jnp.zeros((), jnp.int32))
    else:
        def update(rest, tables, opt, grads, touched):
            upd, opt = tx.update(grads[0], opt, rest)
            return optax.apply_updates(rest, upd), tables, opt
        opt = tx.init(rest)
    upd = jax.jit(update, donate_argnums=(0, 1, 2))
    state = [rest, tables, opt]
    def step(timed):
        t0 = time.perf_counter()
        grads, touched = jax.block_until_ready(fb(state[0], state[1], x))
        t1 = time.perf_counter()
        state[:] = jax.block_until_ready(upd(*state, grads, touched))
        timed.append((t1 - t0, time.perf_counter() - t1))
    step([])
    times = []
    for _ in range(reps): step(times)
    out.update(update_ms=min(u for _, u in times) * 1e3, step_ms=min(g + u for g, u in times) * 1e3,
               rss_peak_step_mib=peak_rss_mib())
    return out


def sweep_worker(d_ffw: int, n_channels: int, k: int, d_model: int, tokens: int, reps: int) -> dict:
    "Time the parts of one sgatlin layer at one d_ffw: gate, neurons (dense / row gradients), table updates."
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    from sgatlin_nb.kernels import lazy_adamw_rows
    from sgatlin_nb.layers import SparselyGatedLinear
    layer = SparselyGatedLinear(d_model, d_ffw, n_channels, k, 128, rngs=nnx.Rngs(0))
    graphdef, tables, rest = nnx.split(layer, lambda path, _: path[-1] in TABLES, nnx.Param)
    x = jax.random.normal(jax.random.key(1), (tokens, d_model))
    gates = jax.jit(layer.gate)(x)
    touched = jax.jit(layer.touched)(gates).rows
    R = n_channels * d_ffw
    out = dict(d_ffw=d_ffw, touched=int((touched < R).sum()), places=int(touched.shape[0]), rows=R)

    gate_loss = lambda rest, x: jnp.sum(nnx.merge(graphdef, tables, rest).gate(x).scores ** 2)
    gate_fb = jax.jit(jax.grad(gate_loss, argnums=(0, 1)))
    def neuron_loss(tables, x, scores, taps):
        y = nnx.merge(graphdef, tables, rest).apply_gates(x, gates._replace(scores=scores), taps)
        return 0.5 * jnp.sum(y ** 2)
    dense_fb = jax.jit(jax.grad(neuron_loss, argnums=(0, 1, 2)))
    rows_fb = jax.jit(lambda tables, x, s: jax.grad(neuron_loss, argnums=(1, 2, 3))(tables, x, s, layer.row_taps(tokens)))
    zeros = jax.jit(lambda tables: jax.tree.map(jnp.zeros_like, tables))  # the least a dense gradient costs
    out['zero_tables_ms'] = best_ms(lambda: jax.block_until_ready(zeros(tables)), reps)
    out['gate_ms'] = best_ms(lambda: jax.block_until_ready(gate_fb(rest, x)), reps)
    out['neurons_dense_ms'] = best_ms(lambda: jax.block_until_ready(dense_fb(tables, x, gates.scores, None)), reps)
    out['neurons_rows_ms'] = best_ms(lambda: jax.block_until_ready(rows_fb(tables, x, gates.scores)), reps)
    row_grads = rows_fb(tables, x, gates.scores)[2]
    dense_grads = dense_fb(tables, x, gates.scores, None)[0]

    tx = optax.adamw(1e-3, b1=0.9, b2=0.95, weight_decay=0.1)
    adamw = jax.jit(lambda p, opt, g: (lambda u: (optax.apply_updates(p, u[0]), u[1]))(tx.update(g, opt, p)),
                    donate_argnums=(0, 1))
    state = [jax.tree.map(lambda a: a + 0, tables)]
    state.append(tx.init(state[0]))
    def dense_step():
        state[:] = jax.block_until_ready(adamw(state[0], state[1], dense_grads))
    out['adamw_tables_ms'] = best_ms(dense_step, reps)
    del dense_grads, state
    lazy = jax.jit(lambda p, m, v, g: lazy_adamw_rows(p, m, v, touched, g, 2, learning_rate=1e-3, weight_decay=0.1),
                   donate_argnums=(0, 1, 2))
    lazy_state = [[jnp.array(tables[n][...]).reshape(R, d_model), jnp.zeros((R, d_model)), jnp.zeros((R, d_model))]
                  for n in TABLES]
    def lazy_step():
        for i in range(2): lazy_state[i] = list(lazy(*lazy_state[i], row_grads[i]))
        jax.block_until_ready(lazy_state)
    out['lazy_adamw_rows_ms'] = best_ms(lazy_step, reps)
    return out


# ---------------------------------------------------------------- driver

def in_subprocess(kind: str, hugepages: bool = False, **kw) -> dict:
    "Run one worker in a fresh Python process and return its measurements."
    cmd = [sys.executable, os.path.abspath(__file__), '--worker', json.dumps(dict(kind=kind, **kw))]
    env = {**os.environ, 'JAX_PLATFORMS': os.environ.get('JAX_PLATFORMS', 'cpu')}
    if hugepages:  # glibc backs large allocations with transparent huge pages: far fewer page faults
        env['GLIBC_TUNABLES'] = 'glibc.malloc.hugetlb=1'
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"worker {kind} {kw} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def fmt(v, spec):
    return format(v, spec) if v is not None else '-'


def layer_table(size: str, rows: dict, batch: int, seq_len: int) -> str:
    s = SIZES[size]
    note = {'tinystories': " (the paper's TinyStories layer)", 'large': ' (beyond the paper: its largest sgatlin layer is 112^2 x 16)'}
    lines = [f"\n== {size}{note.get(size, '')}: d_model {s['d_model']}, d_ffw {s['d_ffw']}, C {s['n_channels']}, k {s['k']}, "
             f"d_key {s['d_key']}; {batch * seq_len} tokens ({batch} x {seq_len}), float32 ==",
             "fwd+bwd: interleaved in one process (alone: in its own process); temp: XLA memory_analysis of "
             "fwd+bwd; RSS: peak of its own process (+run: above the RSS before compiling); update and step: "
             "AdamW (sgatlin-rows: lazy AdamW on the tables)",
             f"{'variant':13s} {'fwd+bwd':>8s} {'/SwiGLU':>8s} {'GFLOP':>6s} {'ms/GFLOP':>9s} {'/SwiGLU':>8s} "
             f"{'alone':>8s} {'temp MiB':>9s} {'RSS MiB':>8s} {'(+run)':>7s} {'update':>8s} {'step':>8s}"]
    sw = rows.get('swiglu')
    for v, r in rows.items():
        gflop = None if v == 'dense-floor' else r['gflop']  # a bound, not a layer: no FLOP count of its own
        per = r['fwd_bwd_ms'] / gflop if gflop else None
        rel = (r['fwd_bwd_ms'] / sw['fwd_bwd_ms']) if sw else None
        rel_flop = (per / (sw['fwd_bwd_ms'] / sw['gflop'])) if sw and per else None
        lines.append(f"{v:13s} {r['fwd_bwd_ms']:8.1f} {fmt(rel, '8.2f')} {fmt(gflop, '6.2f')} {fmt(per, '9.1f')} "
                     f"{fmt(rel_flop, '8.2f')} {r['fwd_bwd_alone_ms']:8.1f} {r['temp_mib']:9.1f} "
                     f"{r['rss_peak_mib']:8.0f} {r['rss_peak_mib'] - r['rss_base_mib']:7.0f} "
                     f"{fmt(r.get('update_ms'), '8.1f')} {fmt(r.get('step_ms'), '8.1f')}")
    nv = rows.get('naive')
    for v in ('sgatlin', 'sgatlin-rows'):
        if nv and v in rows:
            r = rows[v]
            speed, mem = nv['fwd_bwd_ms'] / r['fwd_bwd_ms'], r['temp_mib'] / nv['temp_mib']
            rss = (r['rss_peak_mib'] - r['rss_base_mib']) / max(1.0, nv['rss_peak_mib'] - nv['rss_base_mib'])
            line = (f"{v} vs naive: fwd+bwd {speed:.2f}x faster (target >= 3: {'met' if speed >= 3 else 'NOT met'}), "
                    f"temp memory {mem:.3f} of naive's (target <= 0.25: {'met' if mem <= 0.25 else 'NOT met'}), "
                    f"peak RSS growth {rss:.2f} of naive's")
            if 'step_ms' in r and 'step_ms' in nv:
                line += f"; train step {nv['step_ms'] / r['step_ms']:.2f}x faster"
            lines.append(line)
    fl = rows.get('dense-floor')
    if nv and fl:
        bound = nv['fwd_bwd_ms'] / fl['fwd_bwd_ms']
        line = (f"dense-floor ({fl['fwd_bwd_ms']:.1f} ms: the gate's fwd+bwd and two fresh zero tables): no layer with "
                f"this gate that returns dense table gradients can be more than {bound:.2f}x faster than naive here")
        if 'sgatlin' in rows:
            line += f"; sgatlin's {nv['fwd_bwd_ms'] / rows['sgatlin']['fwd_bwd_ms']:.2f}x is {nv['fwd_bwd_ms'] / rows['sgatlin']['fwd_bwd_ms'] / bound:.0%} of that"
        lines.append(line)
    return '\n'.join(lines)


def sweep_table(results: list, n_channels: int, k: int, tokens: int) -> str:
    cols = ('gate_ms', 'neurons_dense_ms', 'neurons_rows_ms', 'zero_tables_ms', 'adamw_tables_ms', 'lazy_adamw_rows_ms')
    lines = [f"\n== d_ffw sweep: C {n_channels}, k {k}, d_model 256, d_key 128, {tokens} tokens; ms, best of reps ==",
             f"{'d_ffw':>7s} {'gate':>8s} {'neurons':>8s} {'neurons':>8s} {'2 zero':>8s} {'AdamW':>8s} {'lazy':>8s} "
             f"{'touched rows':>22s}",
             f"{'':7s} {'fwd+bwd':>8s} {'dense':>8s} {'rows':>8s} {'tables':>8s} {'tables':>8s} {'AdamW':>8s}"]
    for r in results:
        lines.append(f"{r['d_ffw']:7d} " + ' '.join(f"{r[c]:8.1f}" for c in cols)
                     + f" {r['touched']:>9d} of {r['rows']:>9d}")
    if len(results) > 1:
        a, b = results[0], results[-1]
        lines.append(f"growth from d_ffw {a['d_ffw']} to {b['d_ffw']} (x{b['d_ffw'] // a['d_ffw']}): "
                     + ', '.join(f"{c.removesuffix('_ms')} x{b[c] / a[c]:.1f}" for c in cols))
    return '\n'.join(lines)


def header(meta: dict) -> str:
    return (f"layer_bench: jax {meta['jax']} on {meta['backend']}, {meta['cpu_cores']} CPU cores; "
            f"{meta['rounds']} round(s) x {meta['reps']} reps, best kept; huge pages {'on' if meta['hugepages'] else 'off'}")


def report(results: dict) -> str:
    "The tables of a run from the file `--json` wrote, exactly as the run printed them."
    meta = results['meta']
    parts = [header(meta)] + [layer_table(size, rows, meta['batch'], meta['seq_len'])
                              for size, rows in results['layers'].items()]
    if results['sweep']:
        s = SIZES['large']
        parts.append(sweep_table(results['sweep'], s['n_channels'], s['k'], meta['batch'] * meta['seq_len']))
    return '\n'.join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--quick', action='store_true', help='TinyStories size only, one round of 3 reps, sweep 32² and 64²')
    p.add_argument('--sizes', default='tinystories,large', help=f'comma-separated, of {list(SIZES)}')
    p.add_argument('--variants', default=','.join(VARIANTS), help=f'comma-separated, of {list(VARIANTS)}')
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--seq-len', type=int, default=256)
    p.add_argument('--reps', type=int, default=3, help='timed calls per variant and round (best is kept)')
    p.add_argument('--rounds', type=int, default=1, help='interleaved rounds over the variants')
    p.add_argument('--no-steps', action='store_true', help='skip the train step (optimizer update)')
    p.add_argument('--sweep', default='32,64,128,256', help='sqrt(d_ffw) values of the sweep; empty: none')
    p.add_argument('--hugepages', action='store_true',
                   help='run the workers with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages)')
    p.add_argument('--json', help='also write every measurement to this file')
    p.add_argument('--report', metavar='JSON', help='measure nothing: print the tables of a file that --json wrote')
    p.add_argument('--worker', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        kw = json.loads(a.worker)
        fn = {'layer': layer_worker, 'compare': compare_worker, 'sweep': sweep_worker}[kw.pop('kind')]
        print(json.dumps(fn(**kw)))
        return
    if a.report:
        print(report(json.loads(open(a.report).read())))
        return
    if a.quick:
        a.sizes, a.rounds, a.reps, a.sweep = 'tinystories', 1, 3, '32,64'
    import jax
    meta = dict(jax=jax.__version__, backend=jax.default_backend(), cpu_cores=os.cpu_count(), rounds=a.rounds,
                reps=a.reps, hugepages=a.hugepages, batch=a.batch, seq_len=a.seq_len,
                command=' '.join(['python benchmarks/layer_bench.py'] + sys.argv[1:]))
    print(header(meta), flush=True)
    results = {'meta': meta, 'layers': {}, 'sweep': []}
    variants = [v for v in a.variants.split(',') if v]
    for v in variants:
        if v not in VARIANTS: p.error(f"--variants: {v!r} is not one of {list(VARIANTS)}")
    common = dict(batch=a.batch, seq_len=a.seq_len, reps=a.reps, hugepages=a.hugepages)
    for size in [s for s in a.sizes.split(',') if s]:
        if size not in SIZES: p.error(f"--sizes: {size!r} is not one of {list(SIZES)}")
        best = {}
        for _ in range(a.rounds):  # keep the best time of each kind over the rounds, the memory of the first
            for v in variants:
                r = in_subprocess('layer', variant=v, size=size, steps=not a.no_steps, **common)
                best[v] = r if v not in best else {
                    key: min(val, r[key]) if key.endswith('_ms') and key in r else val for key, val in best[v].items()}
            side_by_side = in_subprocess('compare', variants=variants, size=size, **{**common, 'reps': a.reps + 2})
            for v, t in side_by_side.items(): best[v]['fwd_bwd_ms'] = min(t, best[v].get('fwd_bwd_ms', t))
        results['layers'][size] = best
        print(layer_table(size, best, a.batch, a.seq_len), flush=True)
    sweep = [int(r) for r in a.sweep.split(',') if r]
    if sweep:
        s = SIZES['large']
        tokens = a.batch * a.seq_len
        for r in sweep:
            results['sweep'].append(in_subprocess('sweep', d_ffw=r * r, n_channels=s['n_channels'], k=s['k'],
                                                  d_model=s['d_model'], tokens=tokens, reps=a.reps,
                                                  hugepages=a.hugepages))
        print(sweep_table(results['sweep'], s['n_channels'], s['k'], tokens), flush=True)
    if a.json:
        with open(a.json, 'w') as f: json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
