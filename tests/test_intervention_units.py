"Unit checks of sgatlin_nb.intervention moved from nbs/13_intervention.ipynb (issue 71): the refusals of encode_rows, bos_id, logit_diffs and template_pairs, and template_pairs' fallback without spaCy. The page keeps the checks of what it shows; tests/test_intervention.py has the rest."
import importlib.util
import sys
import types

import fastcore.test as fc  # test_eq and test_fail as the page used them (imported by module: pytest would collect test_* names)
import jax
import numpy as np
import pytest
from flax import nnx

from sgatlin_nb.baselines import FFWConfig
from sgatlin_nb.intervention import (PatchRow, bos_id, counterfactual_pairs, encode_rows, grid_cells, logit_diffs,
                                     regex_template_pairs, template_pairs)
from sgatlin_nb.model import ModelConfig, Transformer
from sgatlin_nb.reference import reference_run
from sgatlin_nb.runs import load_run

PROBE = ["The cat was scared. The dog was not. The cat was scared, but calm.",  # the page's probe sentences
         "The box was filled with toys. The girl was so happy! The sun was shining.",
         "The car was broken and old. The Dog was big. The turtle was slowly walking."]


@pytest.fixture(scope="module")
def tokenizer():
    "The reference run's tokenizer (the authors'), as the page loads it."
    return load_run(reference_run())[1]


@pytest.mark.parametrize("row, says", [
    (PatchRow('The cat was', 'The dog was', 'xqzzyv', 'big'), 'one token'),
    (PatchRow('The cat was', 'The old dog was', 'sad', 'big'), 'same number of tokens'),
    (PatchRow('The cat was', 'The dog was', 'big', 'big'), 'same token'),
])
def test_encode_rows_refuses_rows_it_cannot_compare(tokenizer, row, says):
    "A target of several tokens, prompts of unequal length, or a foil equal to the target are refused."
    fc.test_fail(lambda: encode_rows([row], tokenizer), contains=says)


def test_bos_id_refuses_a_token_the_tokenizer_lacks(tokenizer):
    "Asking for a beginning-of-sequence token the vocabulary lacks fails."
    fc.test_fail(lambda: bos_id(tokenizer, '<|nothing|>'), contains='no')


@pytest.fixture(scope="module")
def grid():
    "A random 2-layer sgatlin model, 4 prompts of 4 tokens with one target each, their 12 ordered pairs and the grid's masks."
    cfg = ModelConfig(vocab_size=97, d_model=128, n_layers=2, seq_len=16,
                      ffw=FFWConfig(kind='sgatlin', d_model=128, d_ffw=64, n_channels=2, k=4, d_key=16))
    tokens_NxT = np.asarray(jax.random.randint(jax.random.key(0), (4, 4), 0, 97), np.int32)
    return (Transformer(cfg, rngs=nnx.Rngs(0)), tokens_NxT, np.arange(20, 24, dtype=np.int32), counterfactual_pairs(4),
            grid_cells(2, 4))


@pytest.mark.parametrize("bad, says", [
    ('mask', '[M, n_layers, T]'),
    ('pairs', 'prompt indices in [0,'),
    ('targets', 'one target per prompt'),
    ('source', "['patch', 'clean']"),
    ('cells_per_step', 'cells_per_step must be a positive integer'),
])
def test_logit_diffs_refuses_bad_arguments(grid, bad, says):
    "Masks of the wrong shape, pair indices out of range, too few targets, an unknown source and cells_per_step=0 are refused."
    model, tokens_NxT, targets_N, pairs_Px2, cells = grid
    args = dict(tokens_NxT=tokens_NxT, targets_N=targets_N, pairs_Px2=pairs_Px2, masks_MxLxT=cells.mask)
    kw = {}
    if bad == 'mask': args['masks_MxLxT'] = cells.mask[:, :1]
    if bad == 'pairs': args['pairs_Px2'] = pairs_Px2 + 100
    if bad == 'targets': args['targets_N'] = targets_N[:2]
    if bad == 'source': kw['source'] = 'other'
    if bad == 'cells_per_step': kw['cells_per_step'] = 0
    fc.test_fail(lambda: logit_diffs(model, *args.values(), **kw), contains=says)


NO_SPACY = importlib.util.find_spec('spacy') is None  # the page checks the first two only where spaCy is not installed


@pytest.mark.skipif(not NO_SPACY, reason="spaCy is installed: there is no missing package to report")
def test_without_spacy_the_spacy_parser_names_the_install_command():
    "Without spaCy, parser='spacy' fails with the pip command."
    fc.test_fail(lambda: template_pairs(PROBE, 'spacy'), contains='pip install spacy')


@pytest.mark.skipif(not NO_SPACY, reason="spaCy is installed: 'auto' uses it")
def test_without_spacy_auto_falls_back_to_the_regex():
    "Without spaCy, parser='auto' gives the regular expression's counts."
    fc.test_eq(template_pairs(PROBE, 'auto'), regex_template_pairs(PROBE))


@pytest.fixture
def spacy_without_model(monkeypatch):
    "A stand-in spacy module whose load fails as a missing English model does."
    def no_model(name, **kw): raise OSError(f"[E050] Can't find model '{name}'")
    monkeypatch.setitem(sys.modules, 'spacy', types.SimpleNamespace(load=no_model))


def test_a_missing_english_model_names_the_download_command(spacy_without_model):
    "With spaCy but no English model, parser='spacy' fails with the download command."
    fc.test_fail(lambda: template_pairs(PROBE, 'spacy'), contains='python -m spacy download en_core_web_sm')


def test_a_missing_english_model_makes_auto_fall_back_to_the_regex(spacy_without_model):
    "With spaCy but no English model, parser='auto' gives the regular expression's counts."
    fc.test_eq(template_pairs(PROBE, 'auto'), regex_template_pairs(PROBE))


def test_template_pairs_refuses_an_unknown_parser():
    "A parser other than auto, spacy or regex is refused, naming the three."
    fc.test_fail(lambda: template_pairs(PROBE, 'nltk'), contains="['auto', 'spacy', 'regex']")
