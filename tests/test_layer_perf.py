"""The fast sgatlin kernels against the direct gather-einsum formulation: equal outputs and gradients,
row-sparse gradients equal to the dense ones, and a fraction of the reference's temporary memory.
Wall-clock times are measured by benchmarks/layer_bench.py, never asserted here."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sgatlin_nb.layers import SparselyGatedLinear, reference_gated_neurons

TABLES = ('w_in', 'w_out')


def split(layer):
    "graphdef, the two neuron tables, every other parameter."
    return nnx.split(layer, lambda path, _: path[-1] in TABLES, nnx.Param)


def losses(layer, x, cotangent):
    "Loss functions of (tables, rest, x[, taps]) through the layer, the reference, and the layer with taps."
    graphdef = split(layer)[0]
    C, k, D = layer.n_channels, layer.k, layer.d_model

    def fast(tables, rest, x):
        return jnp.vdot(nnx.merge(graphdef, tables, rest)(x).astype(jnp.float32), cotangent)

    def reference(tables, rest, x):
        m = nnx.merge(graphdef, tables, rest)
        g = m.gate(x)
        y = reference_gated_neurons(x.reshape(-1, D), g.scores.reshape(-1, C, k), g.indices.reshape(-1, C, k),
                                    m.w_in[...], m.w_out[...], m.activation)
        return jnp.vdot(y.reshape(x.shape), cotangent)

    def tapped(tables, rest, x, taps):
        m = nnx.merge(graphdef, tables, rest)
        return jnp.vdot(m.apply_gates(x, m.gate(x), taps).astype(jnp.float32), cotangent)
    return fast, reference, tapped


def assert_close(a, b, rtol):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1e-3, float(np.abs(b).max())))


CONFIGS = [  # d_model, d_ffw, n_channels, k, d_key, tokens (batch, seq), activation, router, chunk_tokens
    (32, 16 ** 2, 2, 3, 16, (3, 13), None, 'product_dense', 5),         # chunk does not divide 39 tokens
    (48, 24 ** 2, 3, 4, 8, (2, 32), 'gelu', 'product_dense', None),
    (64, 64 ** 2, 4, 8, 32, (5, 10), 'relu', 'product_dense', 16),       # far more rows than selections
    (40, 12 ** 2, 2, 5, 8, (1, 30), 'swish', 'product_dense', 1),
    (32, 32 ** 2, 3, 6, 16, (4, 9), None, 'product_key_value', 7),
]


@pytest.mark.parametrize('cfg', CONFIGS, ids=[f'D{c[0]}-F{c[1]}-C{c[2]}-k{c[3]}-{c[6]}-{c[7]}-chunk{c[8]}' for c in CONFIGS])
def test_equals_reference_float32(cfg):
    d_model, d_ffw, C, k, d_key, (b, t), activation, router, chunk = cfg
    seed = sum(cfg[:5])
    layer = SparselyGatedLinear(d_model, d_ffw, C, k, d_key, activation=activation, router=router, chunk_tokens=chunk,
                                rngs=nnx.Rngs(seed))
    x = jax.random.normal(jax.random.key(seed), (b, t, d_model))
    cot = jax.random.normal(jax.random.key(seed + 1), x.shape)
    fast, reference, tapped = losses(layer, x, cot)
    _, tables, rest = split(layer)
    v1, g1 = jax.jit(jax.value_and_grad(fast, argnums=(0, 1, 2)))(tables, rest, x)
    v2, g2 = jax.jit(jax.value_and_grad(reference, argnums=(0, 1, 2)))(tables, rest, x)
    assert_close(v1, v2, 1e-5)
    leaves1, leaves2 = jax.tree.leaves(g1), jax.tree.leaves(g2)
    assert len(leaves1) == len(leaves2) == 5  # w_in, w_out; w_key, w_query; x
    for a, r in zip(leaves1, leaves2):
        assert_close(a, r, 1e-5)
    # the row-sparse path: same loss, other gradients unchanged, and the touched rows of the dense table gradients
    taps = layer.row_taps(b * t)
    v3, g3 = jax.jit(jax.value_and_grad(tapped, argnums=(1, 2, 3)))(tables, rest, x, taps)
    assert_close(v3, v1, 1e-6)
    for a, r in zip(jax.tree.leaves(g3[:2]), jax.tree.leaves(g1[1:])):
        assert_close(a, r, 1e-6)
    rows = np.asarray(jax.jit(lambda x: layer.touched(layer.gate(x)).rows)(x))
    used = rows < C * d_ffw
    assert used.sum() == len(np.unique(rows[used]))
    for name, tap_grad in zip(TABLES, g3[2]):
        dense = np.asarray(g1[0][name][...]).reshape(C * d_ffw, d_model)
        np.testing.assert_array_equal(np.asarray(tap_grad)[used], dense[rows[used]])
        assert np.abs(np.asarray(tap_grad)[~used]).max(initial=0) == 0
        untouched = np.ones(C * d_ffw, bool); untouched[rows[used]] = False
        assert np.abs(dense[untouched]).max(initial=0) == 0


def test_bfloat16_compute_close_to_float32_reference():
    layer = SparselyGatedLinear(64, 32 ** 2, 4, 8, 32, dtype=jnp.bfloat16, rngs=nnx.Rngs(3))
    x = jax.random.normal(jax.random.key(3), (4, 16, 64))
    cot = jax.random.normal(jax.random.key(4), x.shape)
    fast, reference, _ = losses(layer, x, cot)
    _, tables, rest = split(layer)
    y = layer(x)
    assert y.dtype == x.dtype == jnp.float32  # float32 in and out, bfloat16 inside
    g1 = jax.tree.leaves(jax.jit(jax.grad(fast, argnums=(0, 1, 2)))(tables, rest, x))
    g2 = jax.tree.leaves(jax.jit(jax.grad(reference, argnums=(0, 1, 2)))(tables, rest, x))
    for a, r in zip(g1, g2):
        assert a.dtype == jnp.float32  # gradients of float32 parameters stay float32
        rel = np.linalg.norm(np.asarray(a) - np.asarray(r)) / np.linalg.norm(np.asarray(r))
        assert rel < 3e-2, rel  # bfloat16 has 8 bits of mantissa
        assert rel > 0  # and it really ran in bfloat16


def fwd_bwd_temp_bytes(d_ffw, n_channels, reference: bool, tokens=(8, 256)) -> int:
    "Temporary bytes XLA plans for forward+backward of the layer (compiled on abstract shapes, never run)."
    layer = nnx.eval_shape(lambda: SparselyGatedLinear(256, d_ffw, n_channels, 8, 128, rngs=nnx.Rngs(0)))
    x = jax.ShapeDtypeStruct((*tokens, 256), jnp.float32)
    fast, ref, _ = losses(layer, x, jnp.ones((*tokens, 256)))
    _, tables, rest = split(layer)
    fn = jax.jit(jax.grad(ref if reference else fast, argnums=(0, 1, 2)))
    return fn.lower(tables, rest, x).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize('d_ffw,n_channels', [(1024, 8), (256 ** 2, 16)], ids=['tinystories', 'large'])
def test_temporary_memory_is_a_quarter_of_the_reference(d_ffw, n_channels):
    fast, ref = fwd_bwd_temp_bytes(d_ffw, n_channels, False), fwd_bwd_temp_bytes(d_ffw, n_channels, True)
    assert fast <= ref / 4, (fast / 2**20, ref / 2**20)
    # no temporary copy of a table (1 GiB at d_ffw = 256², C = 16): what remains is the gate's, O(C·sqrt(d_ffw))
    table_bytes = n_channels * d_ffw * 256 * 4
    assert fast < max(table_bytes / 2, 64 * 2**20), (fast / 2**20, table_bytes / 2**20)
