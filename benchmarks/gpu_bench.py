"""The GPU benchmark: sgatlin's layer and whole training steps on one accelerator, time-boxed, each figure printed as
it comes and written to a JSON file at once.

Run it first whenever a GPU is lent (the project rarely has one), and commit the JSON it writes:

    python benchmarks/gpu_bench.py --out benchmarks/results            # on a GPU: at most 8 minutes, compiles included
    python benchmarks/gpu_bench.py --mini --out /tmp/bench               # the same code at toy sizes on a CPU (CI runs this)

On a lent machine whose image has JAX with CUDA but not every package sgatlin_nb imports, carry the missing wheels:
`bash scripts/device_wheels.sh` writes them into .whl/ here; there, run
`python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_bench.py --out "$OUT"`.

Seven parts, in this order, so that a short time box still gives the most important numbers first (every part prints
each figure as it comes, and the JSON is rewritten after each; a figure that needs a GPU is "not on a GPU" elsewhere):

1. Versions: jax, jaxlib, CUDA and cuDNN, the device, and what importing the package did about jaxlib 0.10.2-0.11.0's
   slow float32 scatter-adds (`sgatlin_nb.kernels.fix_gpu_scatter_adds`).
2. The scatter-add that made the embedding's gradient a hazard: `[50257, 768]` float32 rows from 32,768 token ids of
   real text (GPT-2 tokens of the repository's C4 and TinyStories samples, where the most frequent token repeats about
   1,000 times) against as many uniform ids, as `table.at[ids].add` (atomic adds on a GPU) and as the package's sorted
   segment sum (`take_rows`' gradient); on an affected jaxlib the atomic adds again in a child process without the fix.
3. The whole train step on one device at the s6 rung with fewer blocks (`--step-layers`), on real tokens: sgatlin and
   its SwiGLU twin first, then sgatlin with its blocks scanned (`use_scan`), the MoE and PEER: tokens/s, MFU from the package's FLOP accounting, the device's
   `peak_bytes_in_use` so far (the process's peak over the models run until then: the first model's alone; gpu_followup.py
   runs each in a process of its own) beside the package's estimate and XLA's plan, and the attention the compiled step runs.
4. Each sparse kernel alone at s6's per-device sizes (32,768 tokens, C·k = 128 selections, bfloat16 tables): the two
   gathers and the table gradient of 01a_kernels, and the gate's backward pass; microseconds, GB/s and FLOP/byte against
   the HBM roofline, and the GPU kernels against the CPU kernels on the same device, outputs compared.
5. The layer alone, forward (its output kept) and backward in bfloat16 (parameters float32), at the per-device sizes of the paper's rungs
   s4, s6 and s8: sgatlin with its GPU kernels (interpreted with --mini on a CPU) and with its CPU kernels, the
   authors' formulation in float32 as theirs is (gather the selected rows, two einsums, autodiff), and the SwiGLU of
   equal forward FLOPs, timed interleaved (A B C A B C ...), best of `--reps`; compare ratios within a run.
6. Attention at the s6 shapes (16 x 2,048 tokens, 12 heads of 64) in bfloat16, forward+backward: cuDNN's fused
   kernel against XLA's, timed side by side, and their largest difference.
7. Determinism: the gradient of sgatlin's loss evaluated twice from the same state, compared bit for bit, with the names
   of the parameters whose gradients differ; where they differ on a GPU, again with XLA's attention (on the H200, cuDNN's
   attention backward was the one source of difference: benchmarks/results/gpu_followup_nvidia_h200.json).
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
DATA = Path(__file__).resolve().parents[1] / 'data'  # the samples the repository carries


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
    "Jitted forward+backward (the loss, and the gradients of every parameter and of x) of each variant, and their inputs."
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
            if name == 'authors':  # the paper's listing A.1 in float32, as the authors' code runs it: gather, two einsums; autodiff
                x32 = x.astype(jnp.float32)
                g = m.gate(x32)
                y = reference_gated_neurons(x32, g.scores, g.indices, m.w_in[...], m.w_out[...])
            else:
                y = m(x)
            return jnp.sum(y.astype(jnp.float32) * ct)
        # the loss beside the gradients: the forward output is then computed, as in training (with jax.grad alone XLA
        # drops the forward gather_combine, which the H200's layer figures of 2026-11-28 therefore left out)
        out[name] = (jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), params)
    return out, x


def real_tokens(n: int):
    "`n` GPT-2 token ids of real text: the repository's C4 samples, then its TinyStories validation stories, repeated if short."
    import numpy as np
    from sgatlin_nb.data import eot_id, load_tokenizer, packed_ids, read_texts
    tok = load_tokenizer('gpt2', DATA)
    docs = [d for f in ('webtext/c4-sample.01.json.gz', 'webtext/c4-sample.02.json.gz',
                        'webtext/paloma_c4_100_domains_theguardian_val.jsonl.gz', 'tinystories/valid_head_1000.txt')
            for d in read_texts(f, data_dir=DATA)]
    ids = packed_ids(tok, docs, eot_id(tok), np.int32)
    return np.resize(ids, n)


def versions(res: dict):
    "jax, jaxlib, CUDA and cuDNN (where jaxlib was built with them), the device, and the scatter-add fix's status."
    import os
    import jax
    import jaxlib
    from sgatlin_nb.kernels import SCATTER_FIX_STATUS
    cuda = cudnn = 'not on a GPU'
    if res['platform'] == 'gpu':
        try:
            from jax._src.lib import cuda_versions  # jaxlib's own record of what it runs with
            cuda, cudnn = cuda_versions.cuda_runtime_get_version(), cuda_versions.cudnn_get_version()
        except Exception as e:
            cuda = cudnn = f'unknown ({type(e).__name__})'
    res['versions'] = {'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'cuda_runtime': cuda, 'cudnn': cudnn,
                       'device': res['device_kind'], 'devices': jax.device_count(),
                       'scatter_fix': SCATTER_FIX_STATUS, 'xla_flags': os.environ.get('XLA_FLAGS', '')}
    print('versions ' + ', '.join(f'{k} {v}' for k, v in res['versions'].items()), flush=True)


SCATTER_CHILD = """
import json, sys, time, jax, jax.numpy as jnp, numpy as np
ids = {name: jnp.asarray(np.load(sys.argv[1])[name]) for name in ('real', 'uniform')}
V, D, reps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
upd = jnp.ones((ids['real'].shape[0], D), jnp.float32)
f = jax.jit(lambda i: jnp.zeros((V, D), jnp.float32).at[i].add(upd))
out = {}
for name, i in ids.items():
    jax.block_until_ready(f(i)); best = float('inf')
    for _ in range(reps):
        t0 = time.perf_counter(); jax.block_until_ready(f(i)); best = min(best, time.perf_counter() - t0)
    out[name] = best
print(json.dumps(out))
"""


def bench_scatter(res: dict, save, mini: bool, reps: int, deadline: float):
    "The embedding gradient's scatter-add, on real and on uniform token ids: atomic adds against a sorted segment sum."
    import os
    import subprocess
    import tempfile
    import jax
    import jax.numpy as jnp
    import numpy as np
    from sgatlin_nb.kernels import use_kernels, take_rows
    V, D, N = (50257, 64, 2048) if mini else (50257, 768, 32768)
    real = real_tokens(N)
    ids = {'real': real, 'uniform': np.random.default_rng(0).integers(0, V, N).astype(np.int32)}
    upd = jnp.ones((N, D), jnp.float32)
    fns, args = {}, {}
    for name, i in ids.items():
        i = jnp.asarray(i)
        fns[f'atomic adds, {name} ids'] = jax.jit(lambda i, u: jnp.zeros((V, D), jnp.float32).at[i].add(u)).lower(i, upd).compile()
        with use_kernels('interpret'):  # take_rows' GPU-path gradient: a sort and a segmented sum (no Pallas kernel in it)
            fns[f'sorted segment sum, {name} ids'] = jax.jit(
                lambda i, u: jax.vjp(lambda t: take_rows(t, i), jnp.zeros((V, D), jnp.float32))[1](u)[0]).lower(i, upd).compile()
        args[f'atomic adds, {name} ids'] = args[f'sorted segment sum, {name} ids'] = (i, upd)
    best = time_interleaved(fns, args, reps, deadline)
    a, b = (fns[f'{how}, real ids'](*args[f'{how}, real ids']) for how in ('atomic adds', 'sorted segment sum'))
    counts = np.bincount(real, minlength=V)
    out = {'table': [V, D], 'ids': N, 'most_repeated_id_count': int(counts.max()), 'distinct_real_ids': int((counts > 0).sum()),
           'max_abs_difference': float(jnp.abs(a - b).max()),
           **{k: {'us': t * 1e6, 'updates_per_s': N / t} for k, t in best.items()}}
    fix = res['versions']['scatter_fix']
    if fix == 'applied':  # the same atomic adds in a child process that runs without the fix
        with tempfile.TemporaryDirectory() as tmp:
            np.savez(f'{tmp}/ids.npz', **ids)
            child = subprocess.run([sys.executable, '-c', SCATTER_CHILD, f'{tmp}/ids.npz', str(V), str(D), str(reps)],
                                   capture_output=True, text=True, timeout=300, env={**os.environ, 'SGATLIN_XLA_WORKAROUND': '0',
                                   'XLA_FLAGS': os.environ.get('XLA_FLAGS', '').replace('-nvptx-allow-ftz-atomics', '')})
        if child.returncode == 0:
            for name, t in json.loads(child.stdout.strip().splitlines()[-1]).items():
                out[f'atomic adds without the fix, {name} ids'] = {'us': t * 1e6, 'updates_per_s': N / t}
        else:
            res['errors'].append(f'scatter without the fix: {child.stderr[-500:]}')
    else:
        out['atomic adds without the fix'] = 'not on a GPU' if res['platform'] != 'gpu' else f'not needed here ({fix})'
    res['scatter'] = out
    print(f"scatter-add [{V}, {D}] from {N} ids (real text: the most frequent id {out['most_repeated_id_count']} times): "
          + ', '.join(f"{k} {v['us']:,.0f} us" for k, v in out.items() if isinstance(v, dict))
          + (f"; {out['atomic adds without the fix']}" if isinstance(out.get('atomic adds without the fix'), str) else ''), flush=True)
    save()


def bench_kernels(res: dict, save, mini: bool, reps: int, deadline: float):
    "The sparse kernels alone at s6's per-device sizes: GPU kernels (interpreted on a CPU) against the CPU kernels, outputs compared."
    import jax
    import jax.numpy as jnp
    from sgatlin_nb.kernels import chunk_rows, gather_combine, gather_dot, scatter_outer, use_kernels
    from sgatlin_nb.layers import SparselyGatedLinear
    from flax import nnx
    sg, _ = layer_configs(6, mini)
    N = 64 if mini else 16 * 2048
    J, D, R = sg.n_channels * sg.k, sg.d_model, sg.n_channels * sg.d_ffw
    ks = jax.random.split(jax.random.key(3), 5)
    table = jax.random.normal(ks[0], (R, D), jnp.bfloat16)
    rows = jax.random.randint(ks[1], (N, J), 0, R)
    v, a = jax.random.normal(ks[2], (N, D), jnp.bfloat16), jax.random.normal(ks[3], (N, J), jnp.float32)
    chunk = chunk_rows(N, J, D, 2, None)
    gpu = 'gpu' if res['platform'] == 'gpu' else 'interpret'
    ops = {  # name: (function of the arrays and a chunk or kernel kind, bytes moved, FLOPs)
        'gather_dot': (lambda t, r, v, a, c: gather_dot(t, r, v, c), N * J * D * 2 + N * D * 2 + N * J * 8, 2 * N * J * D),
        'gather_combine': (lambda t, r, v, a, c: gather_combine(t, r, a, c), N * J * D * 2 + N * J * 8 + N * D * 4, 2 * N * J * D),
        'table gradient': (lambda t, r, v, a, c: scatter_outer(R, r, a, v, c, jnp.float32), N * J * (D * 2 + 8) + R * D * 4,
                           2 * N * J * D)}
    hbm, out, arrays = res['hbm_bytes_per_s'], {}, (table, rows, v, a)
    for name, (fn, nbytes, flops) in ops.items():
        if time.perf_counter() > deadline:
            res['skipped'].append(f'kernel {name}: out of time'); continue
        fns = {k: jax.jit(lambda *xs, fn=fn, c=c: fn(*xs, c)) for k, c in (('GPU kernels', gpu), ('CPU kernels', chunk))}
        outs = {k: f(*arrays) for k, f in fns.items()}
        best = time_interleaved(fns, dict.fromkeys(fns, arrays), reps, deadline)
        row = {'max_abs_difference': float(jnp.abs(outs['GPU kernels'].astype(jnp.float32) - outs['CPU kernels'].astype(jnp.float32)).max()),
               'largest_output': float(jnp.abs(outs['CPU kernels'].astype(jnp.float32)).max()), 'output_dtype': str(outs['CPU kernels'].dtype),
               'bytes': nbytes, 'flops_per_byte': flops / nbytes}
        for k, t in best.items():
            row[k] = {'us': t * 1e6, 'gb_per_s': nbytes / t / 1e9}
            row[k]['hbm_fraction'] = nbytes / t / hbm if hbm and res['platform'] == 'gpu' else 'not on a GPU'
        out[name] = row
        print(f"kernel {name:15s} GPU kernels {row['GPU kernels']['us']:10,.0f} us ({row['GPU kernels']['gb_per_s']:.1f} GB/s)  "
              f"CPU kernels {row['CPU kernels']['us']:10,.0f} us  {row['flops_per_byte']:.2f} FLOP/byte  "
              f"largest difference {row['max_abs_difference']:.1e} (largest output {row['largest_output']:.3g}, {row['output_dtype']})", flush=True)
    # the gate's backward pass: dense score matmuls on the GPU path, the selected sub-keys on the CPU path
    layer = SparselyGatedLinear(sg.d_model, sg.d_ffw, sg.n_channels, sg.k, sg.d_key, rngs=nnx.Rngs(0))
    gdef, params = nnx.split(layer, nnx.Param)
    ct = jax.random.normal(ks[4], (N, sg.n_channels, sg.k), jnp.float32)
    fns = {}
    for kind in (gpu, 'cpu'):
        with use_kernels(kind):
            f = jax.jit(jax.grad(lambda p, x: jnp.sum(nnx.merge(gdef, p).gate(x).scores * ct)))
            fns['GPU kernels' if kind != 'cpu' else 'CPU kernels'] = f.lower(params, v).compile()
    grads = {k: f(params, v) for k, f in fns.items()}
    best = time_interleaved(fns, dict.fromkeys(fns, (params, v)), reps, deadline)
    out['gate backward'] = {'max_abs_difference': max(float(jnp.abs(x - y).max()) for x, y in
                                                      zip(jax.tree.leaves(grads['GPU kernels']), jax.tree.leaves(grads['CPU kernels']))),
                            'largest_output': max(float(jnp.abs(x).max()) for x in jax.tree.leaves(grads['CPU kernels'])),
                            **{k: {'us': t * 1e6} for k, t in best.items()}}
    print(f"kernel gate backward   GPU path {best['GPU kernels'] * 1e6:10,.0f} us  CPU path {best['CPU kernels'] * 1e6:10,.0f} us  "
          f"largest difference {out['gate backward']['max_abs_difference']:.1e}", flush=True)
    res['kernels'] = out
    save()


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
    from sgatlin_nb.model import use_scan
    presets = dict(paper_presets(scales=(6,)))
    base = {'sgatlin': presets['sgatlin-s6'], 'swiglu twin': equal_flops_swiglu(presets['sgatlin-s6']),
            'sgatlin, scanned': presets['sgatlin-s6'], 'moe': presets['moe-s6'], 'peer': presets['peer-s6']}
    mesh = make_mesh(jax.local_devices()[:1])
    for name, cfg in base.items():
        if time.perf_counter() > deadline:
            res['skipped'].append(f'step {name}: out of time'); save(); continue
        try:
            with use_scan(name.endswith('scanned')):  # the blocks as one scan (04_transformer): the same values
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
    from sgatlin_nb.model import attention_in
    from sgatlin_nb.train import init_state, make_train_step, memory_estimate, state_shardings, xla_memory
    cfg = miniature_config(cfg) if mini else make_config(cfg, {'model.n_layers': layers, 'batch_size': 16})
    graphdef, state, tx = init_state(cfg)
    sh = state_shardings(state, mesh, False)
    state = jax.device_put(state, sh)
    fn = make_train_step(graphdef, tx, cfg.grad_accum, sh, mesh, cfg.model.dtype)
    tokens = real_tokens(cfg.batch_size * (cfg.model.seq_len + 1)) % cfg.model.vocab_size  # real text (a miniature's vocabulary is smaller)
    batch = shard_batch(tokens.reshape(cfg.batch_size, cfg.model.seq_len + 1).astype(np.int32), mesh)
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
           'attention': attention_in(compiled.as_text()), 'xla_plan_bytes': xla_memory(compiled)['total'],
           'estimate_bytes': memory_estimate(cfg, 1)['total'], 'xla_temp_bytes': compiled.memory_analysis().temp_size_in_bytes}
    if res['peak_bf16_flops']:
        row['mfu'] = rate * 3 * model_flops(mc.d_model, mc.n_layers, mc.seq_len, mc.vocab_size, mc.ffw, 'full') / res['peak_bf16_flops']
    else: row['mfu'] = 'not on a GPU'
    stats = jax.local_devices()[0].memory_stats() or {}  # the device's allocator; none on a CPU
    row['peak_bytes_so_far'] = stats.get('peak_bytes_in_use', 'not on a GPU')
    res['step'][name] = row
    gb = lambda b: f'{b / 1e9:.2f} GB' if isinstance(b, (int, float)) else b
    print(f"step {name:16s} {rate:12,.0f} tokens/s  MFU " + (f"{row['mfu']:.1%}" if isinstance(row['mfu'], float) else row['mfu'])
          + f"  process peak so far {gb(row['peak_bytes_so_far'])} (estimate {gb(row['estimate_bytes'])}, XLA plan {gb(row['xla_plan_bytes'])})"
          + f"  attention {row['attention']}  ({done} steps, compile {t_compile:.0f} s)", flush=True)


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
    from sgatlin_nb.model import use_attention
    def differing(attention):
        with use_attention(attention):
            f = jax.jit(data_parallel_grads(graphdef, mesh, param_specs(state_shardings(state['params'], mesh, False))))
            a, b = (jax.tree_util.tree_flatten_with_path(f(state['params'], batch)[1])[0] for _ in range(2))
        return len(a), [jax.tree_util.keystr(path) for (path, x), (_, y) in zip(a, b) if np.any(np.asarray(x) != np.asarray(y))]
    batch = jnp.asarray((real_tokens(cfg.batch_size * (cfg.model.seq_len + 1)) % cfg.model.vocab_size).reshape(cfg.batch_size, -1), jnp.int32)
    n, names = differing('auto')
    res['determinism'] = {'arrays': n, 'arrays_differing': len(names), 'differing': names, 'bit_identical': not names}
    print(f"two gradient evaluations: {len(names)} of {n} arrays differ ("
          + ('bit-identical' if not names else 'NOT bit-identical: ' + ', '.join(names)) + ")", flush=True)
    if names and res['platform'] == 'gpu':  # cuDNN's attention backward sums in an arbitrary order: again with XLA's attention
        _, names = differing('xla')
        res['determinism']['with_xla_attention'] = {'arrays_differing': len(names), 'differing': names, 'bit_identical': not names}
        print(f"  with XLA's attention: {len(names)} of {n} arrays differ", flush=True)
    save()


def start_result(stem: str, a, fields: dict):
    """The result of a GPU window's script: the device and versions, `fields`, and `save()` that rewrites the JSON file
    `a.out/{stem}_{device}[_mini].json`; and the deadline (90% of `a.budget_s`: the last figure may run over a little).
    Imports sgatlin_nb.kernels before anything else: it applies the scatter-add fix before XLA reads its flags."""
    t_start = time.perf_counter()
    import sgatlin_nb.kernels  # noqa: F401
    import jax
    import jaxlib
    from sgatlin_nb.distributed import peak_flops
    dev = jax.local_devices()[0]
    res = {'device_kind': dev.device_kind, 'platform': dev.platform, 'jax': jax.__version__, 'jaxlib': jaxlib.__version__,
           'python': platform.python_version(), 'mini': a.mini, 'budget_s': a.budget_s, 'reps': a.reps,
           'peak_bf16_flops': peak_flops(dev.device_kind), 'hbm_bytes_per_s': spec_for(dev.device_kind, HBM_BYTES_PER_S),
           **fields, 'skipped': [], 'errors': []}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}_{re.sub(r'[^a-z0-9]+', '_', dev.device_kind.lower()).strip('_')}{'_mini' if a.mini else ''}.json"
    def save():
        res['elapsed_s'] = time.perf_counter() - t_start
        path.write_text(json.dumps(res, indent=1))
    print(f"{dev.device_kind} ({dev.platform}), jax {jax.__version__}; writing {path}", flush=True)
    versions(res)
    save()
    return res, save, t_start + a.budget_s * 0.9


def run_parts(res: dict, save, deadline: float, parts) -> dict:
    "Run each `(name, function)` of `parts` in order while time is left, a failing part recorded in `res['errors']` without stopping the others; save after each."
    for part, run in parts:
        if time.perf_counter() > deadline:
            res['skipped'].append(f'{part}: out of time'); continue
        t0 = time.perf_counter()
        try: run()
        except Exception as e:
            res['errors'].append(f'{part}: {type(e).__name__}: {str(e)[:500]}')
            print(f'{part}: FAILED ({type(e).__name__}; see errors in the JSON)', flush=True)
        res.setdefault('part_s', {})[part] = round(time.perf_counter() - t0, 1)  # where a time box goes, compiles included
        save()
    save()
    print(f"done in {res['elapsed_s']:.0f} s (" + ', '.join(f'{p} {s:.0f}' for p, s in res.get('part_s', {}).items()) + ')' + (f"; skipped: {', '.join(res['skipped'])}" if res['skipped'] else '')
          + (f"; {len(res['errors'])} part(s) failed" if res['errors'] else ''))
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', required=True, help='folder for the JSON file (named after the device)')
    p.add_argument('--budget-s', type=float, default=480, help='time box, compiles included (default 480 s)')
    p.add_argument('--mini', action='store_true', help='toy sizes: the same code on a CPU in about a minute')
    p.add_argument('--reps', type=int, default=10, help='timed calls per variant and size')
    p.add_argument('--step-layers', type=int, default=4, help='blocks of the whole-step models (s6 rung)')
    p.add_argument('--steps', type=int, default=10, help='timed steps per model')
    a = p.parse_args(argv)
    res, save, deadline = start_result('gpu_bench', a, {
        'kernels': 'sgatlin and PEER: GPU kernels (Pallas tiles) on a GPU, interpreted in the layer part with --mini; CPU kernels otherwise',
        'layer': {}, 'step': {}})
    return run_parts(res, save, deadline, (('scatter', lambda: bench_scatter(res, save, a.mini, a.reps, deadline)),
                                           ('step', lambda: bench_steps(res, save, a.mini, a.step_layers, a.steps, deadline)),
                                           ('kernels', lambda: bench_kernels(res, save, a.mini, a.reps, deadline)),
                                           ('layer', lambda: bench_layers(res, save, a.mini, a.reps, deadline)),
                                           ('attention', lambda: bench_attention(res, save, a.mini, a.reps, deadline)),
                                           ('determinism', lambda: bench_determinism(res, save, a.mini))))


if __name__ == '__main__':
    main()
