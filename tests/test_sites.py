"Sites of the transformer: reading them equals a loop by hand, own values patch back exactly, patches act where and in the order the masks say, the residual stream is a cut, remat, bfloat16 and errors."
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sgatlin_nb.baselines import FFWConfig
from sgatlin_nb.layers import Gates
from sgatlin_nb.model import SITES, ModelConfig, Patch, Transformer

L, B, T, D = 3, 2, 7, 64
FFWS = {'sgatlin': FFWConfig(kind='sgatlin', d_model=D, d_ffw=64, n_channels=2, k=4, d_key=16),
        'moe': FFWConfig(kind='moe', d_model=D, d_ffw=64, n_experts=4, top_k=2),
        'mlp': FFWConfig(kind='mlp', d_model=D, d_ffw=128)}


def make(kind, **kw):
    cfg = ModelConfig(vocab_size=53, d_model=D, n_layers=L, seq_len=16, head_dim=32, ffw=FFWS[kind], **kw)
    return Transformer(cfg, rngs=nnx.Rngs(0))


def sites_of(kind):
    return SITES if kind != 'mlp' else tuple(s for s in SITES if s != 'gates')


TOKENS = jax.random.randint(jax.random.key(1), (B, T), 0, 53)
OTHER = jax.random.randint(jax.random.key(2), (B, T), 0, 53)
read = nnx.jit(lambda m, t: m(t, sites=sites_of(m.cfg.ffw.kind)))
patched = nnx.jit(lambda m, t, p: m(t, patches=p, sites=sites_of(m.cfg.ffw.kind)))


def by_hand(m, tokens, patches=None):
    "Every site by a plain loop over the blocks, each patch written in by hand where its mask is True, in block order."
    patches = patches or {}
    def at(name, l, value):
        if name not in patches: return value
        values, mask = patches[name]
        return jax.tree.map(lambda own, new: jnp.where(mask[l].reshape(mask[l].shape + (1,) * (own.ndim - 2)), new[l], own),
                            value, values)
    out = {s: [] for s in sites_of(m.cfg.ffw.kind)}
    x = jnp.take(m.embed[...], tokens, axis=0)
    pos = jnp.arange(tokens.shape[1])
    for l, b in enumerate(m.blocks):
        x = at('resid_pre', l, x); out['resid_pre'].append(x)
        a = at('attn_out', l, b.attn(b.attn_norm(x), pos)); out['attn_out'].append(a)
        z = b.ffw_norm(x + a)
        if 'gates' in out:
            g = at('gates', l, b.ffw.gate(z)); out['gates'].append(g)
            f = b.ffw.apply_gates(z, g)
        else:
            f = b.ffw(z)
        f = at('ffw_out', l, f); out['ffw_out'].append(f)
        x = at('resid_post', l, x + a + f); out['resid_post'].append(x)
    logits = jnp.einsum('btd,vd->btv', m.final_norm(x), m.embed[...])
    return logits, {s: jax.tree.map(lambda *v: jnp.stack(v), *vals) for s, vals in out.items()}


by_hand_jit = nnx.jit(by_hand)
forward = nnx.jit(lambda m, t: m(t))


def assert_trees_close(a, b, eps):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.shape == y.shape
        if jnp.issubdtype(x.dtype, jnp.integer): np.testing.assert_array_equal(x, y)
        else: np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), atol=eps, rtol=0)


@pytest.mark.parametrize("kind", ['sgatlin', 'mlp'])  # the MoE's gates: test_own_values_patch_back_exactly
def test_read_equals_the_loop_by_hand(kind):
    m = make(kind)
    logits, acts = read(m, TOKENS)
    np.testing.assert_array_equal(logits, forward(m, TOKENS))  # reading changes nothing
    want_logits, want = by_hand_jit(m, TOKENS)
    np.testing.assert_allclose(logits, want_logits, atol=1e-5)
    assert_trees_close(acts, want, 1e-5)
    assert acts['ffw_out'].shape == (L, B, T, D)
    np.testing.assert_array_equal(acts['resid_post'], (acts['resid_pre'] + acts['attn_out']) + acts['ffw_out'])
    np.testing.assert_array_equal(acts['resid_post'][:-1], acts['resid_pre'][1:])


@pytest.mark.parametrize("kind", FFWS)
def test_own_values_patch_back_exactly(kind):
    "One program, any masks: patching a run with its own values gives its logits bit for bit."
    m = make(kind)
    names = sites_of(kind)
    nowhere = jnp.zeros((L, B, T), bool)
    logits, acts = patched(m, TOKENS, {s: (read(m, TOKENS)[1][s], nowhere) for s in names})  # read by the patching program
    assert set(acts) == set(names)
    for seed in range(4):
        masks = jax.random.bernoulli(jax.random.key(seed), 0.5, (len(names), L, B, T))
        got, _ = patched(m, TOKENS, {s: (acts[s], masks[i]) for i, s in enumerate(names)})
        np.testing.assert_array_equal(got, logits)


@pytest.mark.parametrize("kind", ['sgatlin', 'mlp'])
def test_random_patches_match_the_loop_by_hand(kind):
    "Another run's values at random masks at every site at once: the same as writing them in by hand, in block order."
    m = make(kind)
    _, other = read(m, OTHER)
    names = sites_of(kind)
    for seed in range(3):
        masks = jax.random.bernoulli(jax.random.key(10 + seed), 0.3, (len(names), L, B, T))
        p = {s: (other[s], masks[i]) for i, s in enumerate(names)}
        logits, acts = patched(m, TOKENS, p)
        want_logits, want = by_hand_jit(m, TOKENS, p)
        np.testing.assert_allclose(logits, want_logits, atol=1e-4)
        assert_trees_close(acts, want, 1e-4)
        clean = forward(m, TOKENS)
        assert jnp.abs(logits - clean).max() > 1e-3  # the patches did something


@pytest.mark.parametrize("l", range(L))
def test_residual_stream_is_a_cut(l):
    m = make('sgatlin')
    logits_o, other = read(m, OTHER)
    layer_l = jnp.zeros((L, B, T), bool).at[l].set(True)
    for site in ('resid_pre', 'resid_post'):
        got, _ = patched(m, TOKENS, {site: (other[site], layer_l)})
        np.testing.assert_array_equal(got, logits_o)


def test_outputs_everywhere_miss_only_the_embedding():
    "attn_out and ffw_out of another run at every layer and position: that run's final stream plus the embedding difference."
    m = make('sgatlin')
    logits_c = forward(m, TOKENS)
    logits_o, other = read(m, OTHER)
    everywhere = jnp.ones((L, B, T), bool)
    logits, acts = patched(m, TOKENS, {s: (other[s], everywhere) for s in ('attn_out', 'ffw_out')})
    e = lambda t: jnp.take(m.embed[...], t, axis=0)
    np.testing.assert_allclose(acts['resid_post'][-1] - other['resid_post'][-1], e(TOKENS) - e(OTHER), atol=1e-5)
    assert jnp.abs(logits - logits_o).max() > 0.1 and jnp.abs(logits - logits_c).max() > 0.1
    gates_only, _ = patched(m, TOKENS, {'gates': (other['gates'], everywhere)})
    assert jnp.abs(gates_only - logits_o).max() > 0.1


def test_the_per_layer_gate_form_agrees():
    "return_gates / Patch (one Gates per layer) and sites / patches (stacked) are the same computation."
    m = make('sgatlin')
    _, other = read(m, OTHER)
    mask = jax.random.bernoulli(jax.random.key(5), 0.5, (L, B, T))
    per_layer = tuple(Gates(s, i) for s, i in zip(other['gates'].scores, other['gates'].indices))
    old, used = nnx.jit(lambda m, t, p: m(t, patch=p, return_gates=True))(m, TOKENS, Patch(per_layer, mask))
    new, acts = nnx.jit(lambda m, t, v, k: m(t, patches={'gates': (v, k)}, sites=('gates',)))(m, TOKENS, other['gates'], mask)
    np.testing.assert_array_equal(old, new)
    for l in range(L):
        np.testing.assert_array_equal(used[l].indices, acts['gates'].indices[l])


def test_a_stack_of_patches_vmaps():
    m = make('sgatlin')
    _, other = read(m, OTHER)
    masks = jnp.eye(L, dtype=bool)[:, :, None, None] & jnp.ones((1, 1, B, T), bool)  # [L patches, L, B, T]
    each = nnx.jit(lambda m, t, v, ms: jax.vmap(lambda k: m(t, patches={'ffw_out': (v, k)}))(ms))(m, TOKENS, other['ffw_out'], masks)
    for l in range(L):
        np.testing.assert_allclose(each[l], patched(m, TOKENS, {'ffw_out': (other['ffw_out'], masks[l])})[0], atol=1e-5)


def test_remat_reads_the_same_and_differentiates_through_a_patch():
    plain, remat = make('sgatlin'), make('sgatlin', remat=True)
    logits_p, acts_p = read(plain, TOKENS)
    logits_r, acts_r = read(remat, TOKENS)
    np.testing.assert_allclose(logits_r, logits_p, atol=1e-6)
    assert_trees_close(acts_r, acts_p, 1e-6)
    mask = jnp.zeros((L, B, T), bool).at[0, 1, 2].set(True).at[1, 0, 4].set(True)
    @nnx.jit
    def grad(m, v):
        return jax.grad(lambda v: m(TOKENS, patches={'attn_out': (v, mask)})[:, -1, 0].sum())(v)
    g_r, g_p = grad(remat, acts_p['attn_out']), grad(plain, acts_p['attn_out'])
    np.testing.assert_array_equal(jnp.any(g_r != 0, -1), mask)
    np.testing.assert_allclose(g_r, g_p, atol=1e-5)


def test_bfloat16_patches_back_exactly_within_one_program():
    m = make('sgatlin', dtype='bfloat16')
    nowhere = jnp.zeros((L, B, T), bool)
    logits, acts = patched(m, TOKENS, {s: (read(m, TOKENS)[1][s], nowhere) for s in SITES})
    assert acts['ffw_out'].dtype == jnp.bfloat16 and acts['gates'].scores.dtype == jnp.float32
    got, _ = patched(m, TOKENS, {s: (acts[s], ~nowhere) for s in SITES})
    np.testing.assert_array_equal(got, logits)


def test_bad_sites_and_shapes():
    m, mlp = make('sgatlin'), make('mlp')
    _, acts = read(m, TOKENS)
    ok = jnp.ones((L, B, T), bool)
    cases = [
        (lambda: m(TOKENS, sites=('mlp_out',)), "valid sites: ['resid_pre', 'attn_out', 'gates', 'ffw_out', 'resid_post']"),
        (lambda: m(TOKENS, sites='ffw_out'), "a tuple of site names"),
        (lambda: m(TOKENS, patches={'attn': (acts['attn_out'], ok)}), "unknown site 'attn'"),
        (lambda: m(TOKENS, patches={'attn_out': (acts['attn_out'][..., :3], ok)}), f"= {(L, B, T, D)}, got {(L, B, T, 3)}"),
        (lambda: m(TOKENS, patches={'attn_out': (acts['attn_out'], ok.astype(jnp.int32))}), "mask must be boolean"),
        (lambda: m(TOKENS, patches={'attn_out': (acts['attn_out'], ok[:, :1])}), f"[n_layers, batch, time] = {(L, B, T)}"),
        (lambda: m(TOKENS, patches={'attn_out': [acts['attn_out'], ok]}), "must be a pair (values, mask)"),
        (lambda: m(TOKENS, patches={'gates': (acts['gates'].scores, ok)}), "must be Gates(scores, indices)"),
        (lambda: m(TOKENS, patches={'gates': (Gates(*(a[:, :, :, :1] for a in acts['gates'])), ok)}), "shape of the layer's own"),
        (lambda: m(TOKENS, sites=('gates',), return_gates=True), "return_gates does not combine with sites"),
        (lambda: mlp(TOKENS, sites=('gates',)), "this model has ffw.kind='mlp'"),
        (lambda: mlp(TOKENS, patches={'gates': (acts['gates'], ok)}), "need a gated feedforward layer"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=None) as e:
            call()
        assert message in str(e.value), (message, str(e.value))
