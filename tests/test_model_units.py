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


def test_bad_tokens_are_refused(run):
    "Tokens of one dimension, floats, or more positions than seq_len are refused."
    model, tokens = run['model'], run['tokens']
    fc.test_fail(lambda: model(tokens[0]), contains="shape [batch, time]")
    fc.test_fail(lambda: model(tokens.astype(jnp.float32)), contains="must be integers")
    fc.test_fail(lambda: model(jnp.zeros((1, 33), jnp.int32)), contains="at most seq_len=32")


def test_wrong_gate_patches_and_gates_of_an_ungated_model_are_refused(run):
    "A Patch with too few layers, the wrong mask shape or dtype, or other-shaped gates fails; an MLP model has no gates."
    model, tokens, gates, all_true, mlp_model = (run[k] for k in ('model', 'tokens', 'gates', 'all_true', 'mlp_model'))
    fc.test_fail(lambda: model(tokens, patch=Patch(gates[:1], all_true)), contains="one Gates per layer (2)")
    fc.test_fail(lambda: model(tokens, patch=Patch(gates, all_true[:, :1])), contains="[n_layers, batch, time] = (2, 3, 16)")
    fc.test_fail(lambda: model(tokens, patch=Patch(gates, all_true.astype(jnp.int32))), contains="must be boolean")
    fc.test_fail(lambda: model(tokens[:1], patch=Patch(gates, all_true[:, :1])), contains="shape of the layer's own")
    fc.test_fail(lambda: mlp_model(tokens, return_gates=True), contains="this model has ffw.kind='mlp'")
    fc.test_fail(lambda: mlp_model(tokens, patch=Patch(gates, all_true)), contains="ffw.kind in ['moe', 'peer', 'sgatlin']")


def test_bad_sites_and_site_patches_are_refused(run):
    "Unknown sites, a string for sites, patches of the wrong shape, mask or form, and clashing gate arguments are refused."
    model, tokens, gates, acts, all_true = (run[k] for k in ('model', 'tokens', 'gates', 'acts', 'all_true'))
    fc.test_fail(lambda: model(tokens, sites=('mlp_out',)), contains="valid sites: ['resid_pre', 'attn_out', 'gates', 'ffw_out', 'resid_post']")
    fc.test_fail(lambda: model(tokens, sites='gates'), contains="a tuple of site names, e.g. ('gates',)")
    fc.test_fail(lambda: model(tokens, patches={'resid': (acts['resid_pre'], all_true)}), contains="unknown site 'resid'")
    fc.test_fail(lambda: model(tokens, patches={'ffw_out': (acts['ffw_out'][:1], all_true)}),
                 contains="[n_layers, batch, time, d_model] = (2, 3, 16, 128), got (1, 3, 16, 128)")
    fc.test_fail(lambda: model(tokens, patches={'ffw_out': (acts['ffw_out'], all_true[0])}), contains="mask must be boolean of shape [n_layers, batch, time] = (2, 3, 16)")
    fc.test_fail(lambda: model(tokens, patches={'ffw_out': acts['ffw_out']}), contains="must be a pair (values, mask)")
    fc.test_fail(lambda: model(tokens, patches={'gates': (tuple(acts['gates']), all_true)}), contains="must be Gates(scores, indices)")
    fc.test_fail(lambda: model(tokens, patches={'gates': (Gates(*(a[..., :2] for a in acts['gates'])), all_true)}), contains="shape of the layer's own")
    fc.test_fail(lambda: model(tokens, sites=('gates',), return_gates=True), contains="sites=(..., 'gates')")
    fc.test_fail(lambda: model(tokens, patch=Patch(gates, all_true), patches={'gates': (acts['gates'], all_true)}), contains="give one of them")


def test_an_ungated_model_reads_its_other_sites(run):
    "An MLP model refuses the site 'gates' but returns the others, [L, B, T, D]."
    mlp_model, tokens = run['mlp_model'], run['tokens']
    fc.test_fail(lambda: mlp_model(tokens, sites=('gates',)), contains="this model has ffw.kind='mlp'")
    fc.test_eq(mlp_model(tokens, sites=('ffw_out',))[1]['ffw_out'].shape, (2, 3, 16, 128))  # the other sites work for any layer
