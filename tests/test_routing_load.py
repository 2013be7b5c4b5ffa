"""Routing load during training (06_train, `load_stats`): what each logged step of a routed run says about its gates,
checked against a count by hand from the model's own gates on the batches the steps saw, against the closed form of a
collapsed router (every token to the same units), and on 4 forced CPU devices with micro-batches and remat, where the
training state must come out bit for bit the same with the load counted or not."""
import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sgatlin_nb.configs import make_config
from sgatlin_nb.data import PAD_TARGET, TokenFile, train_batch
from sgatlin_nb.runs import load_run, read_metrics
from sgatlin_nb.distributed import make_mesh
from sgatlin_nb.train import init_state, load_record, make_train_step, routed_units, state_shardings, train


def brute_force_load(cfg, params, graphdef, batch) -> dict:
    """The three figures of one batch from the model's gates, counted with numpy in float64: unit `c * d_ffw + i` for
    sgatlin's neuron `i` of channel `c`, expert `i` for PEER and the MoE; padding targets not counted."""
    inputs, real = batch[:, :-1], batch[:, 1:] != PAD_TARGET
    forward = jax.jit(lambda p, t: nnx.merge(graphdef, p)(t, return_gates=True)[1])
    gates = forward(params, jnp.asarray(np.where(inputs == PAD_TARGET, 0, inputs)))
    ffw, U = cfg.model.ffw, routed_units(cfg.model.ffw)
    out = {'load_max': [], 'load_unused': [], 'load_cv': []}
    for g in gates:
        idx = np.asarray(g.indices)[real]                            # [N, C, k] of the real targets
        if ffw.kind == 'sgatlin': idx = idx + ffw.d_ffw * np.arange(idx.shape[1])[:, None]
        counts = np.bincount(idx.reshape(-1), minlength=U).astype(np.float64)
        mean = counts.mean()
        out['load_max'].append(counts.max() / mean)
        out['load_unused'].append(int((counts == 0).sum()))
        out['load_cv'].append(counts.std() / mean)
    return out


def test_logged_load_is_the_count_of_the_steps_own_gates(tmp_path, data_dir, monkeypatch):
    """A run of two layers and two micro-batches: each logged step's figures equal the count by hand of the gates the
    model gives, with the parameters the step started from (its checkpoints), on the step's batch."""
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = make_config('test-tiny', ['steps=3', 'model.n_layers=2', 'grad_accum=2', 'ckpt_every=1', 'keep_ckpts=3',
                                    'eval_every=100'])
    out = tmp_path / 'run'
    train(cfg, 'tinystories', out, progress=False)
    steps = [r for r in read_metrics(out) if 'loss' in r]
    assert [r['step'] for r in steps] == [1, 2, 3]
    graphdef, state, _ = init_state(cfg)
    tf = TokenFile(out / 'data' / 'train.bin')
    for r in steps:
        params = state['params'] if r['step'] == 1 else load_run(out, r['step'] - 1)[3]
        batch = train_batch(cfg, tf, r['step'] - 1)
        want = brute_force_load(cfg, params, graphdef, batch)
        assert r['load_unused'] == want['load_unused'], (r, want)
        for key in ('load_max', 'load_cv'):
            np.testing.assert_allclose(r[key], want[key], rtol=2e-6, err_msg=f"step {r['step']} {key}")
        assert all(1 < m < routed_units(cfg.model.ffw) for m in r['load_max']), r


def collapsed_state(cfg):
    "`init_state` of `cfg` with routers that send every token to the same units: sgatlin's and PEER's queries zero (every score ties), the MoE's router weights zero and its bias picking experts 3 and 7."
    graphdef, state, tx = init_state(cfg)
    for block in state['params']['blocks'].values():
        ffw = block['ffw']
        if cfg.model.ffw.kind == 'moe':
            ffw['w_router'][...] = jnp.zeros_like(ffw['w_router'][...])
            ffw['b_router'][...] = jnp.zeros_like(ffw['b_router'][...]).at[3].set(2.0).at[7].set(1.0)
        else:
            ffw['w_query'][...] = jnp.zeros_like(ffw['w_query'][...])
    return graphdef, state, tx


@pytest.mark.parametrize('kind', ['sgatlin', 'peer', 'moe'])
def test_a_collapsed_router_reports_its_closed_form(kind):
    """Every token chooses the same `s` of `U` units (`s` per channel for sgatlin, the same `k` for every PEER head, the
    MoE's `top_k`): load `U / s` over the ideal at each of them, `U - s` units unused, coefficient of variation
    `sqrt(U / s - 1)`, in every layer."""
    over = ['model.n_layers=2', f'model.ffw.kind={kind}']
    if kind == 'moe': over += ['model.ffw.n_experts=16', 'model.ffw.top_k=2', 'model.ffw.d_ffw=32']
    cfg = make_config('test-tiny', over)
    graphdef, state, tx = collapsed_state(cfg)
    mesh = make_mesh(jax.devices()[:1])
    step = make_train_step(graphdef, tx, cfg.grad_accum, state_shardings(state, mesh, False), mesh)
    batch = np.random.default_rng(0).integers(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.seq_len + 1)).astype(np.int32)
    got = load_record(step(state, jnp.asarray(batch))[1]['load'])
    ffw = cfg.model.ffw
    U = routed_units(ffw)
    s = {'sgatlin': ffw.n_channels * ffw.k, 'peer': ffw.k, 'moe': ffw.top_k}[kind]  # distinct units a token chooses
    assert got['load_unused'] == [U - s] * 2, got
    np.testing.assert_allclose(got['load_max'], [U / s] * 2, rtol=1e-6)
    np.testing.assert_allclose(got['load_cv'], [math.sqrt(U / s - 1)] * 2, rtol=1e-6)


FOUR_DEVICES = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    sys.path.insert(0, sys.argv[1])
    from test_routing_load import brute_force_load
    from sgatlin_nb.configs import make_config
    from sgatlin_nb.distributed import make_mesh
    from sgatlin_nb.train import init_state, load_record, make_train_step, state_shardings
    assert jax.device_count() == 4
    cfg = make_config('test-tiny', ['model.n_layers=2', 'model.remat=true', 'grad_accum=2', 'fsdp=true'])
    mesh = make_mesh()
    graphdef, state, tx = init_state(cfg)
    sh = state_shardings(state, mesh, cfg.fsdp)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.seq_len + 1)).astype(np.int32) for _ in range(3)]
    batches[1][5, 9:] = -1   # PAD_TARGET: padding on one device only
    run = {}
    for load in (False, True):
        step = make_train_step(graphdef, tx, cfg.grad_accum, sh, mesh, load=load)
        s, logged, params = jax.device_put(init_state(cfg)[1], sh), [], []  # the step donates its state
        for b in batches:
            params.append(jax.device_get(s['params']))
            s, m = step(s, jax.device_put(b, NamedSharding(mesh, P('data'))))
            logged.append(load_record(m['load']) if load else None)
        run[load] = (jax.device_get(s), logged, params)
    same = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(run[False][0]), jax.tree.leaves(run[True][0])))
    want = [brute_force_load(cfg, p, graphdef, b) for p, b in zip(run[True][2], batches)]
    print(json.dumps({'bit_identical': same, 'logged': run[True][1], 'want': want}))
""")


def test_four_devices_micro_batches_and_remat(tmp_path):
    """On 4 forced CPU devices, FSDP, two micro-batches, remat, padding on one device: the state after three steps is bit
    for bit the one without the load counted, and each step's figures are the count by hand of the whole batch."""
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--xla_force_host_platform_device_count=4'}
    proc = subprocess.run([sys.executable, '-c', FOUR_DEVICES, os.path.dirname(__file__)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res['bit_identical']
    for got, want in zip(res['logged'], res['want']):
        assert got['load_unused'] == want['load_unused'], (got, want)
        for key in ('load_max', 'load_cv'):
            np.testing.assert_allclose(got[key], want[key], rtol=2e-6, err_msg=key)
