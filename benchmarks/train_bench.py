"""Whole-model training steps per second: the `tinystories-cpu` preset with sgatlin against the same
model with other feedforward layers, timed interleaved in one process (A B A B ...).

Each variant is the preset's transformer (2 layers, d_model 128, seq_len 128, batch 16) with only
the feedforward block swapped; a step is the package's own jitted train step (forward, backward,
AdamW, state donated), on random tokens (the data pipeline is not what is measured). Reported: the
best step time over all rounds, tokens/s, the ratio to SwiGLU, forward FLOPs per token (the
package's count, `model_flops` with the output layer) and time per FLOP relative to SwiGLU (the
isoflop view), and each variant's compiled temporary memory.

    python benchmarks/train_bench.py                  # sgatlin, swiglu, mlp; about 2 minutes on 2 cores
    python benchmarks/train_bench.py --variants sgatlin,swiglu,moe,peer --steps 20
"""
import argparse
import dataclasses
import time


def variant_config(name: str, base):
    "The preset with its feedforward layer replaced: SwiGLU/MLP 4·d_model wide, MoE 16 experts of d_model."
    from sgatlin_nb.baselines import FFWConfig
    D = base.model.d_model
    s = base.model.ffw
    ffw = {'sgatlin': s,
           'swiglu': FFWConfig('swiglu', D, 4 * D),
           'mlp': FFWConfig('mlp', D, 4 * D),
           'moe': FFWConfig('moe', D, D),
           'peer': dataclasses.replace(s, kind='peer')}[name]
    return dataclasses.replace(base, model=dataclasses.replace(base.model, ffw=ffw))


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--preset', default='tinystories-cpu')
    p.add_argument('--variants', default='sgatlin,swiglu,mlp')
    p.add_argument('--steps', type=int, default=10, help='timed steps per variant and round')
    p.add_argument('--rounds', type=int, default=3)
    a = p.parse_args()

    import jax
    import numpy as np
    from sgatlin_nb.complexity import model_flops
    from sgatlin_nb.configs import PRESETS
    from sgatlin_nb.distributed import make_mesh, shard_batch
    from sgatlin_nb.train import init_state, make_train_step, state_shardings

    base = PRESETS[a.preset]
    mesh = make_mesh()
    names = a.variants.split(',')
    rng = np.random.default_rng(0)
    runs = {}
    for name in names:
        cfg = variant_config(name, base)
        graphdef, state, tx = init_state(cfg)
        shardings = state_shardings(state, mesh, False)
        state = jax.device_put(state, shardings)
        step = make_train_step(graphdef, tx, 1, shardings, mesh)
        batch = shard_batch(rng.integers(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.seq_len + 1),
                                         dtype=np.int32), mesh)
        mem = step.lower(state, batch).compile().memory_analysis()
        state, _ = step(state, batch); jax.block_until_ready(state)  # compile and warm up
        m = cfg.model
        runs[name] = dict(step=step, state=state, batch=batch, best=float('inf'),
                          temp_mib=mem.temp_size_in_bytes / 2**20 if mem else float('nan'),
                          flops=model_flops(m.d_model, m.n_layers, m.seq_len, m.vocab_size, m.ffw, 'full'),
                          tokens=cfg.batch_size * m.seq_len)
    for _ in range(a.rounds):
        for name, r in runs.items():
            for _ in range(a.steps):
                t0 = time.perf_counter()
                r['state'], metrics = r['step'](r['state'], r['batch'])
                jax.block_until_ready(metrics)
                r['best'] = min(r['best'], time.perf_counter() - t0)
    ref = runs.get('swiglu') or next(iter(runs.values()))
    print(f"== {a.preset}: train step (forward+backward+AdamW), {ref['tokens']} tokens/step, best of "
          f"{a.rounds}x{a.steps} interleaved steps; ratios to {'swiglu' if 'swiglu' in runs else names[0]}")
    print(f"{'variant':9s} {'ms/step':>8s} {'tok/s':>8s} {'time x':>7s} {'fwd MFLOP/tok':>13s} {'time/FLOP x':>11s} {'temp MiB':>9s}")
    for name, r in runs.items():
        ratio = r['best'] / ref['best']
        print(f"{name:9s} {r['best'] * 1e3:8.1f} {r['tokens'] / r['best']:8.0f} {ratio:7.2f} {r['flops'] / 1e6:13.2f} "
              f"{ratio * ref['flops'] / r['flops']:11.2f} {r['temp_mib']:9.1f}")


if __name__ == '__main__':
    main()
