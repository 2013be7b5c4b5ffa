"Unit checks of sgatlin_nb.model moved from nbs/04_transformer.ipynb (issue 71): the one-line errors of ModelConfig and of Transformer's inputs, patches and sites, on the page's tiny model. The page keeps the checks of what it shows."
import dataclasses

import fastcore.test as fc  # test_eq and test_fail as the page used them (imported by module: pytest would collect test_* names)
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from sgatlin_nb.baselines import FFWConfig
from sgatlin_nb.layers import Gates
from sgatlin_nb.model import SITES, ModelConfig, Patch, Transformer

TINY = ModelConfig(vocab_size=97, d_model=128, n_layers=2, seq_len=32,
                   ffw=FFWConfig(kind='sgatlin', d_model=128, d_ffw=64, n_channels=2, k=4, d_key=16))  # the page's `tiny`


@pytest.fixture(scope="module")
def run():
    "The page's tiny model on its 3 x 16 random tokens: the gates per layer, every site's values, an all-True mask, and an MLP model."
    model = Transformer(TINY, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(3), (3, 16), 0, TINY.vocab_size)
    _, gates = model(tokens, return_gates=True)
    _, acts = model(tokens, sites=SITES)
    all_true = jnp.ones((TINY.n_layers, *tokens.shape), bool)
    mlp_model = Transformer(dataclasses.replace(TINY, ffw=FFWConfig(kind='mlp', d_model=128, d_ffw=256)), rngs=nnx.Rngs(0))
    return dict(model=model, tokens=tokens, gates=gates, acts=acts, all_true=all_true, mlp_model=mlp_model)


@pytest.mark.parametrize("change, says", [
    (dict(d_model=100), "nearest valid: 64 or 128"),
    (dict(head_dim=63), "head_dim must be even"),
    (dict(rope_base=float('nan')), 'rope_base must be a finite number above 1'),
    (dict(rope_base=-1.0), 'rope_base must be a finite number above 1'),
    (dict(d_model=256), "ffw.d_model must equal d_model=256"),
    (dict(dtype='bf16'), "'bfloat16'"),
    (dict(n_layers=0), "n_layers must be a positive integer"),
])
def test_a_bad_model_config_is_refused_saying_what_is_valid(change, says):
    "ModelConfig refuses a width, head size, rotary base, feedforward width, dtype or depth it cannot build, in one line."
    fc.test_fail(lambda: dataclasses.replace(TINY, **change), contains=says)


BAD_TOKENS = [  # (what is wrong, the call on the page's run, what the error must say)
    ('one dimension', lambda r: r['model'](r['tokens'][0]), "shape [batch, time]"),
    ('floats', lambda r: r['model'](r['tokens'].astype(jnp.float32)), "must be integers"),
    ('too long', lambda r: r['model'](jnp.zeros((1, 33), jnp.int32)), "at most seq_len=32"),
]


@pytest.mark.parametrize("call, says", [c[1:] for c in BAD_TOKENS], ids=[c[0] for c in BAD_TOKENS])
def test_bad_tokens_are_refused(run, call, says):
    "Tokens of one dimension, floats, or more positions than seq_len are refused."
    fc.test_fail(lambda: call(run), contains=says)


BAD_GATE_PATCHES = [
    ('too few layers', lambda r: r['model'](r['tokens'], patch=Patch(r['gates'][:1], r['all_true'])), "one Gates per layer (2)"),
    ('mask shape', lambda r: r['model'](r['tokens'], patch=Patch(r['gates'], r['all_true'][:, :1])), "[n_layers, batch, time] = (2, 3, 16)"),
    ('mask dtype', lambda r: r['model'](r['tokens'], patch=Patch(r['gates'], r['all_true'].astype(jnp.int32))), "must be boolean"),
    ('gates shape', lambda r: r['model'](r['tokens'][:1], patch=Patch(r['gates'], r['all_true'][:, :1])), "shape of the layer's own"),
    ('mlp return_gates', lambda r: r['mlp_model'](r['tokens'], return_gates=True), "this model has ffw.kind='mlp'"),
    ('mlp patch', lambda r: r['mlp_model'](r['tokens'], patch=Patch(r['gates'], r['all_true'])), "ffw.kind in ['moe', 'peer', 'sgatlin']"),
]


@pytest.mark.parametrize("call, says", [c[1:] for c in BAD_GATE_PATCHES], ids=[c[0] for c in BAD_GATE_PATCHES])
def test_wrong_gate_patches_and_gates_of_an_ungated_model_are_refused(run, call, says):
    "A Patch with too few layers, the wrong mask shape or dtype, or other-shaped gates fails; an MLP model has no gates."
    fc.test_fail(lambda: call(run), contains=says)


BAD_SITES = [
    ('unknown site', lambda r: r['model'](r['tokens'], sites=('mlp_out',)), "valid sites: ['resid_pre', 'attn_out', 'gates', 'ffw_out', 'resid_post']"),
    ('sites string', lambda r: r['model'](r['tokens'], sites='gates'), "a tuple of site names, e.g. ('gates',)"),
    ('unknown patch site', lambda r: r['model'](r['tokens'], patches={'resid': (r['acts']['resid_pre'], r['all_true'])}), "unknown site 'resid'"),
    ('values shape', lambda r: r['model'](r['tokens'], patches={'ffw_out': (r['acts']['ffw_out'][:1], r['all_true'])}),
     "[n_layers, batch, time, d_model] = (2, 3, 16, 128), got (1, 3, 16, 128)"),
    ('mask shape', lambda r: r['model'](r['tokens'], patches={'ffw_out': (r['acts']['ffw_out'], r['all_true'][0])}),
     "mask must be boolean of shape [n_layers, batch, time] = (2, 3, 16)"),
    ('not a pair', lambda r: r['model'](r['tokens'], patches={'ffw_out': r['acts']['ffw_out']}), "must be a pair (values, mask)"),
    ('gates not Gates', lambda r: r['model'](r['tokens'], patches={'gates': (tuple(r['acts']['gates']), r['all_true'])}),
     "must be Gates(scores, indices)"),
    ('gates shape', lambda r: r['model'](r['tokens'], patches={'gates': (Gates(*(a[..., :2] for a in r['acts']['gates'])), r['all_true'])}),
     "shape of the layer's own"),
    ('sites and return_gates', lambda r: r['model'](r['tokens'], sites=('gates',), return_gates=True), "sites=(..., 'gates')"),
    ('patch and patches', lambda r: r['model'](r['tokens'], patch=Patch(r['gates'], r['all_true']),
                                               patches={'gates': (r['acts']['gates'], r['all_true'])}), "give one of them"),
    ('mlp gates site', lambda r: r['mlp_model'](r['tokens'], sites=('gates',)), "this model has ffw.kind='mlp'"),
]


@pytest.mark.parametrize("call, says", [c[1:] for c in BAD_SITES], ids=[c[0] for c in BAD_SITES])
def test_bad_sites_and_site_patches_are_refused(run, call, says):
    "Unknown sites, a string for sites, patches of the wrong shape, mask or form, clashing gate arguments and an MLP's gates are refused."
    fc.test_fail(lambda: call(run), contains=says)


def test_an_ungated_model_reads_its_other_sites(run):
    "An MLP model returns the sites other than 'gates', [L, B, T, D]."
    fc.test_eq(run['mlp_model'](run['tokens'], sites=('ffw_out',))[1]['ffw_out'].shape, (2, 3, 16, 128))  # the other sites work for any layer
