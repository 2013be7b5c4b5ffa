"Patching (the gates and the other sites) and the normalized indirect effect: exact invariants on a random model, the matching, the spaCy guard, a run end to end."
import dataclasses
import itertools
import sys
import types
from collections import Counter

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from flax import nnx

from sgatlin_nb.baselines import FFWConfig
from sgatlin_nb.intervention import (ALL, PAPER_NOUNS, EncodedRows, KnowledgePair, PatchRow, grid_cells, known_pairs,
                                     logit_diffs, match_pairs, noun_adjective_rows, normalized_indirect_effect,
                                     patch_experiment, regex_template_pairs, row_logit_diffs,
                                     spacy_template_pairs, template_pairs)
from sgatlin_nb.model import SITES, ModelConfig, Patch, Transformer
from sgatlin_nb.configs import PRESETS
from sgatlin_nb.train import train

N_LAYERS, T = 3, 4


@pytest.fixture(scope="module")
def setup():
    "A random 3-layer model and 6 prompts that share positions 0, 1 and 3 and differ at position 2."
    cfg = ModelConfig(vocab_size=97, d_model=128, n_layers=N_LAYERS, seq_len=16,
                      ffw=FFWConfig(kind='sgatlin', d_model=128, d_ffw=64, n_channels=2, k=4, d_key=16))
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    nouns = np.arange(10, 16)
    tokens = np.stack([np.array([3, 7, n, 9]) for n in nouns]).astype(np.int32)
    targets = np.arange(40, 46, dtype=np.int32)
    pairs = np.array([(i, j) for i in range(6) for j in range(6) if i != j], np.int32)
    cells = grid_cells(N_LAYERS, T)
    return model, tokens, targets, pairs, cells


def _cell(cells, l, t):
    return int(np.flatnonzero((cells.layer == l) & (cells.position == t))[0])


def test_own_gates_give_exactly_zero(setup):
    model, tokens, targets, pairs, cells = setup
    own = logit_diffs(model, tokens, targets, pairs, cells.mask, source='clean')
    assert (own.do == own.clean[None]).all()
    assert (normalized_indirect_effect(own) == 0).all()


def test_structural_zeros_are_exact(setup):
    "Positions before the differing token, and the last layer before the last position, cannot matter."
    model, tokens, targets, pairs, cells = setup
    nie = normalized_indirect_effect(logit_diffs(model, tokens, targets, pairs, cells.mask))
    for l in [*range(N_LAYERS), ALL]:
        for t in (0, 1):
            assert (nie[_cell(cells, l, t)] == 0).all(), (l, t)
    for t in range(T - 1):
        assert (nie[_cell(cells, N_LAYERS - 1, t)] == 0).all(), t
    assert np.abs(nie[_cell(cells, 0, 2)]).max() > 1e-3  # the differing position does matter


def test_cells_match_a_single_patched_run(setup):
    "Each cell is the model run on the clean prompt with the counterfactual's gates at that cell's sites."
    model, tokens, targets, pairs, cells = setup
    diffs = logit_diffs(model, tokens, targets, pairs, cells.mask)
    p = 7
    i, j = pairs[p]
    _, gates_j = model(jnp.asarray(tokens[j:j + 1]), return_gates=True)
    for m in [_cell(cells, 0, 2), _cell(cells, 1, 3), _cell(cells, ALL, ALL)]:
        logits = model(jnp.asarray(tokens[i:i + 1]), patch=Patch(gates_j, jnp.asarray(cells.mask[m][:, None, :])))
        want = float(logits[0, -1, targets[i]] - logits[0, -1, targets[j]])
        np.testing.assert_allclose(diffs.do[m, p], want, atol=1e-4)


def test_vmapped_cells_agree(setup):
    model, tokens, targets, pairs, cells = setup
    a = logit_diffs(model, tokens, targets, pairs, cells.mask)
    b = logit_diffs(model, tokens, targets, pairs, cells.mask, cells_per_step=5)
    np.testing.assert_allclose(b.do, a.do, atol=1e-4)
    np.testing.assert_allclose(b.clean, a.clean, atol=1e-4)


def test_gates_alone_do_not_give_one(setup):
    "The claim 'patching every layer at every position gives NIE 1' is false for prompts with different embeddings."
    model, tokens, targets, pairs, cells = setup
    nie_all = normalized_indirect_effect(logit_diffs(model, tokens, targets, pairs, cells.mask))[_cell(cells, ALL, ALL)]
    assert (np.abs(nie_all - 1) > 0.05).mean() > 0.5


def test_gates_and_tokens_give_one(setup):
    "Patching the counterfactual's gates into the counterfactual prompt is the counterfactual run: NIE 1."
    model, tokens, targets, pairs, cells = setup
    i, j = pairs[0]
    all_sites = jnp.ones((N_LAYERS, 1, T), bool)
    m = lambda logits: float(logits[0, -1, targets[i]] - logits[0, -1, targets[j]])
    logits_j, gates_j = model(jnp.asarray(tokens[j:j + 1]), return_gates=True)
    m_c, m_p = m(model(jnp.asarray(tokens[i:i + 1]))), m(logits_j)
    m_do = m(model(jnp.asarray(tokens[j:j + 1]), patch=Patch(gates_j, all_sites)))
    assert abs((m_do - m_c) / (m_p - m_c) - 1) < 1e-4


def test_equal_embeddings_make_the_nie_undefined(setup):
    "'Everything else equal' for a one-token difference means equal embeddings: then m(x_patch) = m(x_clean), 0/0."
    model, tokens, targets, pairs, cells = setup
    twin = nnx.clone(model)
    twin.embed[...] = twin.embed[...].at[int(tokens[0, 2])].set(twin.embed[...][int(tokens[1, 2])])
    d = logit_diffs(twin, tokens[:2], targets[:2], np.array([[0, 1], [1, 0]]), cells.mask)
    assert (d.patch - d.clean == 0).all()
    assert np.isnan(normalized_indirect_effect(d)).all()
    assert not known_pairs(d).any()


def test_bad_arguments(setup):
    model, tokens, targets, pairs, cells = setup
    with pytest.raises(ValueError, match=r"\[M, n_layers, T\]"):
        logit_diffs(model, tokens, targets, pairs, cells.mask[:, :2])
    with pytest.raises(ValueError, match="source must be one of"):
        logit_diffs(model, tokens, targets, pairs, cells.mask, source='counterfactual')
    with pytest.raises(ValueError, match="prompt indices"):
        logit_diffs(model, tokens, targets, pairs - 1, cells.mask)


@pytest.mark.parametrize("site", SITES)
def test_own_values_give_exactly_zero_at_every_site(setup, site):
    model, tokens, targets, pairs, cells = setup
    own = logit_diffs(model, tokens, targets, pairs, cells.mask, source='clean', site=site)
    assert (own.do == own.clean[None]).all()
    gates = logit_diffs(model, tokens, targets, pairs, cells.mask)
    assert (own.clean == gates.clean).all() and (own.patch == gates.patch).all()  # the same unpatched runs


@pytest.mark.parametrize("site", SITES)
def test_structural_zeros_at_every_site(setup, site):
    "Positions before the differing token never matter; after the last layer, only the last position does."
    model, tokens, targets, pairs, cells = setup
    nie = normalized_indirect_effect(logit_diffs(model, tokens, targets, pairs, cells.mask, site=site))
    for l in [*range(N_LAYERS), ALL]:
        for t in (0, 1):
            assert (nie[_cell(cells, l, t)] == 0).all(), (l, t)
    if site != 'resid_pre':  # the stream entering the last layer still reaches the last position through attention
        for t in range(T - 1):
            assert (nie[_cell(cells, N_LAYERS - 1, t)] == 0).all(), t
    assert np.abs(nie[_cell(cells, 0, 2)]).max() > 1e-3


@pytest.mark.parametrize("site", ['resid_pre', 'resid_post'])
def test_the_residual_stream_gives_exactly_one(setup, site):
    "A layer's whole residual stream is a cut: patched at every position, the clean run becomes the counterfactual run."
    model, tokens, targets, pairs, cells = setup
    nie = normalized_indirect_effect(logit_diffs(model, tokens, targets, pairs, cells.mask, site=site))
    for l in [*range(N_LAYERS), ALL]:
        assert (nie[_cell(cells, l, ALL)] == 1).all(), l
    if site == 'resid_pre':  # the first layer's input at the differing position is the token's embedding
        assert (nie[_cell(cells, 0, 2)] == 1).all()


@pytest.mark.parametrize("site", ['attn_out', 'ffw_out', 'resid_pre'])
def test_site_cells_match_a_single_patched_run(setup, site):
    model, tokens, targets, pairs, cells = setup
    diffs = logit_diffs(model, tokens, targets, pairs, cells.mask, site=site)
    p = 11
    i, j = pairs[p]
    _, acts_j = model(jnp.asarray(tokens[j:j + 1]), sites=(site,))
    for m in [_cell(cells, 0, 2), _cell(cells, 1, 3), _cell(cells, ALL, 2)]:
        logits = model(jnp.asarray(tokens[i:i + 1]), patches={site: (acts_j[site], jnp.asarray(cells.mask[m][:, None, :]))})
        want = float(logits[0, -1, targets[i]] - logits[0, -1, targets[j]])
        np.testing.assert_allclose(diffs.do[m, p], want, atol=1e-4)


def test_sites_of_a_model_without_gates(setup):
    model, tokens, targets, pairs, cells = setup
    mlp = Transformer(dataclasses.replace(model.cfg, ffw=FFWConfig(kind='mlp', d_model=128, d_ffw=256)), rngs=nnx.Rngs(0))
    own = logit_diffs(mlp, tokens, targets, pairs, cells.mask, source='clean', site='ffw_out')
    assert (own.do == own.clean[None]).all()
    with pytest.raises(ValueError, match="ffw.kind='mlp'"):
        logit_diffs(mlp, tokens, targets, pairs, cells.mask)  # the default site, the gates
    with pytest.raises(ValueError, match=r"site must be one of \['resid_pre', 'attn_out', 'gates', 'ffw_out', 'resid_post'\]"):
        logit_diffs(model, tokens, targets, pairs, cells.mask, site='mlp_out')


@pytest.mark.parametrize("seed", range(20))
def test_matching_is_maximum_and_valid(seed):
    rng = np.random.default_rng(seed)
    nouns, adjs = [f"n{i}" for i in range(6)], [f"a{i}" for i in range(5)]
    counts = Counter({(n, a): int(rng.integers(1, 6)) for n in nouns for a in adjs if rng.random() < 0.3})
    got = match_pairs(counts, min_count=2)
    edges = [p for p, c in counts.items() if c >= 2]
    best = next((r for r in range(len(edges), 0, -1) for sub in itertools.combinations(edges, r)
                 if len({n for n, _ in sub}) == r == len({a for _, a in sub})), 0)
    assert len(got) == best
    assert len({p.noun for p in got}) == len({p.adjective for p in got}) == len(got)
    assert all(counts[p.noun, p.adjective] == p.count >= 2 for p in got)


def test_regex_extractor_rules():
    text = ("The cat was scared. The box was filled with toys. The girl was so happy. The sun was shining. "
            "The car was broken and old. The owl was wise, but the dog was not.")
    assert regex_template_pairs([text]) == Counter({('cat', 'scared'): 1, ('car', 'broken'): 1, ('owl', 'wise'): 1})


class _Tok:
    def __init__(self, text, pos):
        self.text, self.pos_ = text, pos


def test_spacy_path_with_a_stand_in_tagger(monkeypatch):
    "The tag pattern The/NOUN/was/ADJ, run on tagged tokens from a stand-in for spaCy."
    tagged = {"The cat was sleepy .": ["DET", "NOUN", "AUX", "ADJ", "PUNCT"],
              "The cat was sleeping .": ["DET", "NOUN", "AUX", "VERB", "PUNCT"],
              "The Sun was amazing and warm": ["DET", "PROPN", "AUX", "ADJ", "CCONJ", "ADJ"]}
    nlp = types.SimpleNamespace(pipe=lambda texts, batch_size: [
        [_Tok(w, p) for w, p in zip(t.split(), tagged[t])] for t in texts])
    monkeypatch.setitem(sys.modules, 'spacy', types.SimpleNamespace(load=lambda name, disable: nlp))
    assert spacy_template_pairs(list(tagged)) == Counter({('cat', 'sleepy'): 1})
    assert template_pairs(list(tagged), 'auto') == Counter({('cat', 'sleepy'): 1})  # auto prefers spaCy when present


def test_spacy_guard(monkeypatch):
    def no_model(name, **kw):
        raise OSError(f"Can't find model '{name}'")
    monkeypatch.setitem(sys.modules, 'spacy', types.SimpleNamespace(load=no_model))
    with pytest.raises(ImportError, match="python -m spacy download en_core_web_sm"):
        template_pairs(["The cat was sleepy."], 'spacy')
    assert template_pairs(["The cat was sleepy."], 'auto') == Counter({('cat', 'sleepy'): 1})
    monkeypatch.setitem(sys.modules, 'spacy', None)  # `import spacy` raises ImportError
    with pytest.raises(ImportError, match="pip install spacy"):
        template_pairs(["The cat was sleepy."], 'spacy')
    with pytest.raises(ValueError, match="parser must be one of"):
        template_pairs(["The cat was sleepy."], 'stanza')


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir):
    "A 30-step test-tiny run, trained once for the tests below, which only read it (checked after each)."
    from conftest import snapshot
    run = tmp_path_factory.mktemp("tiny") / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("SGATLIN_DATA_DIR", str(data_dir))
    train(PRESETS['test-tiny'], 'tinystories', run, progress=False)
    mp.undo()
    before = snapshot(run)
    yield run
    assert snapshot(run) == before, "a test wrote into the shared run"


def test_patch_experiment_end_to_end(tiny_run, tmp_path, data_dir, monkeypatch):
    "The whole experiment on a 30-step test-tiny run, into a directory."
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    table = patch_experiment(tiny_run, tmp_path / 'out', min_count=1, n_boot=100)
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == [
        'nie.csv', 'nie.html', 'nie.png', 'pairs.csv', 'per_pair.csv']
    assert (tmp_path / 'out' / 'nie.png').read_bytes()[:4] == b'\x89PNG'
    n_layers = PRESETS['test-tiny'].model.n_layers
    assert len(table) == (n_layers + 1) * 5
    assert list(dict.fromkeys(table.position)) == ['<|endoftext|>', 'The', '[noun]', 'was', 'all positions']
    assert (table.loc[table.position.isin(['<|endoftext|>', 'The']), 'median_all'] == 0).all()
    per_pair = pd.read_csv(tmp_path / 'out' / 'per_pair.csv')
    n = len(pd.read_csv(tmp_path / 'out' / 'pairs.csv'))
    assert len(per_pair) == n * (n - 1) and (per_pair.clean != per_pair.patch).all()


def test_patch_experiment_paper_nouns_without_bos(tiny_run, tmp_path, data_dir, monkeypatch):
    "The paper's 8 nouns need no corpus; bos=False gives the three-token prompts."
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    table = patch_experiment(tiny_run, tmp_path / 'out', nouns='paper', bos=False, n_boot=50)
    assert list(dict.fromkeys(table.position)) == ['The', '[noun]', 'was', 'all positions']
    assert table.n_pairs.iloc[0] == 56
    assert pd.read_csv(tmp_path / 'out' / 'pairs.csv').noun.tolist() == list(PAPER_NOUNS)
    with pytest.raises(ValueError, match="nouns must be one of"):
        patch_experiment(tiny_run, tmp_path / 'x', nouns='mine')
    by_ffw = patch_experiment(tiny_run, tmp_path / 'ffw', nouns='paper', bos=False, n_boot=50, site='ffw_out')
    assert set(pd.read_csv(tmp_path / 'ffw' / 'nie.csv').site) == {'ffw_out'}
    assert set(pd.read_csv(tmp_path / 'out' / 'nie.csv').site) == {'gates'}
    assert (by_ffw.n_known == table.n_known).all() and not np.allclose(by_ffw.median_all, table.median_all)
    with pytest.raises(ValueError, match="site must be one of"):
        patch_experiment(tiny_run, tmp_path / 'x', nouns='paper', site='mlp_out')


def test_rows_equal_index_form(setup):
    "row_logit_diffs on rows built from prompt indices equals logit_diffs, exactly; encode_rows refuses misaligned rows."
    model, tokens, targets, pairs, cells = setup
    c, p = pairs[:, 0], pairs[:, 1]
    by_rows = row_logit_diffs(model, EncodedRows(tokens[c], tokens[p], targets[c], targets[p]), cells.mask)
    by_index = logit_diffs(model, tokens, targets, pairs, cells.mask)
    for a, b in zip(by_rows, by_index):
        assert (a == b).all()
    rows = noun_adjective_rows({'cat': 'sad', 'dog': 'big', 'sun': 'hot'})
    assert len(rows) == 6 and rows[0] == PatchRow('The cat was', 'The dog was', 'sad', 'big')
