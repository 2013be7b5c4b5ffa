"""`sgatlin graph` writes a file that circuit-tracer's own reader accepts, and a graph that adds up.

circuit-tracer (the library behind Neuronpedia's attribution-graph viewer) describes a graph file with pydantic models
in `circuit_tracer/frontend/graph_models.py`. The library itself needs torch, so it is not installed: scripts/test.sh
downloads its wheel (no dependencies) into build/wheels/, and this test loads that one module from it.
"""
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, run_sgatlin

WHEELS = ROOT / "build" / "wheels"


def circuit_tracer_models():
    """circuit-tracer's `graph_models` module, loaded from its wheel in build/wheels/ (scripts/test.sh puts it there;
    run alone, this file downloads it the same way)."""
    wheels = sorted(WHEELS.glob("circuit_tracer-*.whl"))
    if not wheels:
        res = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "circuit-tracer==0.5.0",
                              "-d", str(WHEELS)], capture_output=True, text=True, timeout=300)
        wheels = sorted(WHEELS.glob("circuit_tracer-*.whl"))
        if not wheels:
            pytest.fail(f"no circuit-tracer wheel in {WHEELS}, and pip could not download it: {res.stderr[-1000:]}")
    target = WHEELS / "graph_models.py"
    with zipfile.ZipFile(wheels[-1]) as z:
        target.write_bytes(z.read("circuit_tracer/frontend/graph_models.py"))
    spec = importlib.util.spec_from_file_location("circuit_tracer_graph_models", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def circuit_tracer_feature_models():
    "circuit-tracer's `feature_models` module (the viewer's feature card), from the same wheel as `graph_models`."
    circuit_tracer_models()  # makes sure the wheel is there
    target = WHEELS / "feature_models.py"
    with zipfile.ZipFile(sorted(WHEELS.glob("circuit_tracer-*.whl"))[-1]) as z:
        target.write_bytes(z.read("circuit_tracer/frontend/feature_models.py"))
    spec = importlib.util.spec_from_file_location("circuit_tracer_feature_models", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_graph_file_is_read_by_circuit_tracer(tmp_path, turtle):
    """One command writes graph.json with head loadings (--heads) and circuit-tracer's feature files (--features); the library's
    own models read both. The circuit database is two stories, the prompt itself first (after end-of-text, as the graph reads it)."""
    import numpy as np
    from sgatlin_nb.graph import recorded_activations
    from sgatlin_nb.record import build_circuit_db
    models, fm = circuit_tracer_models(), circuit_tracer_feature_models()
    model, tokenizer, full, _ = turtle
    db = build_circuit_db(model, tokenizer, ["The turtle was", "Once there was a turtle. The turtle was slow, and the dog was fast."],
                          tmp_path / "db", progress=False)
    res = run_sgatlin(["graph", "The turtle was", "--target", " slow", "--prune", "none", "--heads", "--out", str(tmp_path / "g"),
                       "--features", str(tmp_path / "f"), "--db", str(tmp_path / "db")], None)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "head loadings of every kept edge in" in res.stdout, res.stdout
    payload = json.loads((tmp_path / "g" / "graph.json").read_text())
    graph = models.Model(**payload)  # raises on a missing or mistyped field
    links = [models.Link(**l) for l in graph.links]
    ids = {n.node_id for n in graph.nodes}
    assert len(ids) == len(graph.nodes) and all(l.source in ids and l.target in ids for l in links)
    kinds = {n.feature_type for n in graph.nodes}
    assert kinds == {"embedding", "cross layer transcoder", "logit"}, kinds  # no error nodes
    assert graph.metadata.prompt_tokens[0] == "<|endoftext|>" and [n.is_target_logit for n in graph.nodes].count(True) == 1
    # exactness, read back from the file alone: each neuron's activation and the target logit equal their incoming links
    into = {}
    for l in links: into[l.target] = into.get(l.target, 0.0) + l.weight
    values = {n.node_id: n.activation for n in graph.nodes if n.feature_type != "embedding"}
    top = max(abs(v) for v in values.values())
    assert max(abs(into.get(i, 0.0) - v) for i, v in values.items()) < 1e-5 * top
    # --heads: every link carries its split over the heads of each layer it crosses, which sums to its weight (read from the file)
    n_layers = max(int(n.layer) for n in graph.nodes if n.layer != "E") - 1
    layer_of = {n.node_id: -1 if n.layer == "E" else int(n.layer) for n in graph.nodes}
    worst, crossed = 0.0, 0
    for l in graph.links:
        split = l["head_loadings"]
        assert sorted(map(int, split)) == list(range(layer_of[l["source"]] + 1, min(layer_of[l["target"]], n_layers - 1) + 1)), (l, split)
        for part in split.values():
            worst = max(worst, abs(sum(part["heads"]) + part["bypass"] - l["weight"]))
            crossed += any(part["heads"])
    assert worst < 1e-6 * max(abs(l.weight) for l in links) and crossed > len(links), (worst, crossed)
    view = (tmp_path / "g" / "graph.html").read_text()
    assert view.count("bypass") >= min(600, len(links)) and "layer 1: head 0 " in view  # each drawn edge's hover names them
    # the library's own helper for a feature node gives our neurons' ids and feature numbers
    neuron = next(n for n in graph.nodes if n.feature_type == "cross layer transcoder")
    layer, feat, pos = map(int, neuron.node_id.split("_"))
    same = models.Node.feature_node(layer, pos, feat, activation=neuron.activation)
    assert (same.node_id, same.feature, same.jsNodeId) == (neuron.node_id, neuron.feature, neuron.jsNodeId)
    # --features: a card per neuron node, named by its Cantor number, that circuit-tracer's feature models accept
    nodes = [n for n in graph.nodes if n.feature_type == "cross layer transcoder"]
    folder = tmp_path / "f" / "features" / "sgatlin"
    assert sorted(int(p.stem) for p in folder.glob("*.json")) == sorted({n.feature for n in nodes}) and nodes
    for n in nodes:
        card = fm.Model(**json.loads((folder / f"{n.feature}.json").read_text()))
        assert card.index == n.feature and len(card.top_logits) == len(card.bottom_logits) == 10
        firings = sum(card.histogram)
        assert firings >= 1 and abs(card.activation_frequency - firings / db.n_rows) < 1e-12
        assert card.act_min - 1e-4 <= n.activation <= card.act_max + 1e-4   # the node's own firing is among them
        assert card.quantile_values == sorted(card.quantile_values) and card.examples_quantiles[0].examples
    # the values the cards hold are the graph nodes' activations: each neuron's recorded value at the prompt's rows
    neu = full.nodes[full.nodes.kind == "neuron"]
    acts = recorded_activations(model, db, zip(neu.layer, neu.channel, neu.neuron))
    gap = max(abs(dict(zip(*acts[r.layer, r.channel, r.neuron]))[r.pos] - r.value) for r in neu.itertuples())
    assert gap < 1e-5 * np.abs(neu.value).max(), gap
    res = run_sgatlin(["graph", "The turtle was", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "x")], None)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--db goes with --features" in res.stderr, res.stderr


def test_neuronpedia_dry_run_sends_nothing(tmp_path, turtle, monkeypatch):
    """Neuronpedia's own client, run by `neuronpedia_dry_run` on a graph file, passes it and gives its first request (the
    signed upload address for the compressed file); no connection is opened. A file its checks refuse is named in one line."""
    import gzip
    import socket
    from sgatlin_nb.graph import neuronpedia_dry_run
    model, tokenizer, _, _ = turtle
    res = run_sgatlin(["graph", "The turtle was", "--out", str(tmp_path / "g")], None)
    assert res.returncode == 0, res.stderr[-2000:]
    opened = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, *a: opened.append(a))
    path = tmp_path / "g" / "graph.json"
    dry = neuronpedia_dry_run(path)
    meta = json.loads(path.read_text())["metadata"]
    assert dry["method"] == "POST" and dry["url"].endswith("/graph/signed-put"), dry
    assert dry["json"] == {"filename": meta["slug"] + ".json", "contentLength": len(gzip.compress(path.read_text().encode())),
                           "contentType": "application/json"}, dry
    assert opened == []
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"metadata": {k: v for k, v in meta.items() if k != "prompt_tokens"}}))
    with pytest.raises(ValueError, match="Neuronpedia's client refuses .*bad.json: Metadata must contain 'prompt_tokens'"):
        neuronpedia_dry_run(bad)


def test_graph_refuses_a_model_it_cannot_freeze(tmp_path, data_dir):
    "A run whose neurons are not linear (here an MLP) is refused in one line, and nothing is written."
    run = tmp_path / "mlp"
    res = run_sgatlin(["train", "--config", "test-tiny", "--out", str(run), "--steps", "2", "--quiet",
                       "model.ffw.kind=mlp", "model.ffw.d_ffw=128"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_sgatlin(["graph", "The dog", "--run", str(run), "--out", str(tmp_path / "g")], data_dir)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "linear gated neurons" in res.stderr, res.stderr
    assert not (tmp_path / "g").exists()


# Issue 69: circuits through attention, exactly.

@pytest.fixture(scope="module")
def turtle():
    "The reference model and the full graph of 'The turtle was' → ' slow' (517 nodes, every edge)."
    import numpy as np
    from flax import nnx
    from sgatlin_nb.graph import attribution_graph
    from sgatlin_nb.intervention import bos_id
    from sgatlin_nb.reference import reference_run
    from sgatlin_nb.runs import load_run
    cfg, tokenizer, graphdef, params, _ = load_run(reference_run())
    model = nnx.merge(graphdef, params)
    ids = [bos_id(tokenizer), *tokenizer.encode("The turtle was").ids]
    graph = attribution_graph(model, ids, tokenizer.encode(" slow").ids[0], tokenizer)
    t_i, s_i = np.nonzero(graph.adjacency)
    return model, tokenizer, graph, np.stack([t_i, s_i], 1)


def test_head_loadings_sum_to_every_edge_and_equal_removing_the_head(turtle):
    """At every layer, each edge's head loadings plus its bypass (computed apart: the edge with the layer's heads removed)
    equal the edge; and each head's loading is the edge's change when that head's output is zeroed in the frozen model."""
    import numpy as np
    from sgatlin_nb.graph import edge_loadings, masked_edges
    model, _, graph, edges = turtle
    heads, bypass = edge_loadings(graph, edges)
    weight = graph.adjacency[edges[:, 0], edges[:, 1]]
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert heads.shape == (len(edges), L, H) and bypass.shape == (len(edges), L)
    scale = np.abs(weight).max()
    gap = np.abs(heads.sum(-1, dtype=np.float64) + bypass - weight[:, None]).max() / scale
    assert gap < 1e-6, gap
    assert np.abs(heads).max() > 0.1 * scale   # heads carry a real share, not zeros beside a bypass equal to the edge
    worst = 0.0
    for l in range(L):
        for h in range(H):
            mask = np.ones((L, H)); mask[l, h] = 0.0
            worst = max(worst, np.abs(weight - masked_edges(graph, edges, mask) - heads[:, l, h]).max() / scale)
    assert worst < 1e-6, worst
    print(f"largest sum error {gap:.1e}, largest gap to head removal {worst:.1e} of the largest edge ({len(edges)} edges)")


def test_head_loadings_refuse_bad_input_in_one_line(turtle):
    import numpy as np
    from sgatlin_nb.graph import head_loadings
    model, _, graph, edges = turtle
    n = len(graph.nodes)
    cases = [((n, 0), 0, "past the graph's"), ((0, 1), 0, "no edge from node 1 to node 0"),  # an embedding receives nothing
             (tuple(edges[0]), model.cfg.n_layers, "layer must be an attention layer in [0, 4)"), (tuple(edges[0]), -1, "layer must be")]
    for edge, layer, msg in cases:
        with pytest.raises(ValueError, match=msg.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")) as e:
            head_loadings(graph, edge, layer)
        assert "\n" not in str(e.value)
    got = head_loadings(graph, tuple(edges[-1]), 0)
    assert abs(got.heads.sum() + got.bypass - got.edge) < 1e-6 * np.abs(graph.adjacency).max()


def _check_qk_sums(model, ids, layer, head, tol):
    "Every (query, key) of one head: the pair terms sum to the model's own pre-softmax score; those scores give the frozen probabilities."
    import jax
    import jax.numpy as jnp
    import numpy as np
    from sgatlin_nb.circuits import linearized_forward
    from sgatlin_nb.graph import attention_scores, qk_attribution
    S = len(ids)
    scores = np.asarray(attention_scores(model, ids, layer))
    probs = jax.nn.softmax(jnp.where(np.tril(np.ones((S, S), bool)), scores, -jnp.inf), -1)
    assert np.abs(probs - linearized_forward(model, ids)[1].attn_probs[layer]).max() < 1e-5
    worst = max(abs(qk_attribution(model, ids, layer, head, i, j).total - scores[head, i, j]) for i in range(S) for j in range(i + 1))
    assert worst < tol, worst
    return worst


def test_qk_pair_terms_sum_to_the_score_at_every_query_and_key(turtle):
    import numpy as np
    from sgatlin_nb.graph import qk_attribution
    from sgatlin_nb.intervention import bos_id
    model, tokenizer, _, _ = turtle
    ids = [bos_id(tokenizer), *tokenizer.encode("There was a dog named Max. Max liked to play.").ids]
    worst = _check_qk_sums(model, ids, 2, 1, 1e-5)
    one = qk_attribution(model, ids, 3, 2, len(ids) - 1, 3, top=5, tokenizer=tokenizer)
    n = 1 + 3 * (model.cfg.n_heads + model.cfg.ffw.n_channels * model.cfg.ffw.k)   # embedding, 3 earlier layers' heads and neurons
    assert one.terms.shape == (n, n) and len(one.top) == 5 and one.query_parts[0] == "embedding of '.'"
    assert abs(one.top.term.iloc[0]) == np.abs(one.terms).max() and one.top.term.abs().is_monotonic_decreasing
    print(f"largest QK sum error {worst:.1e} over {len(ids) * (len(ids) + 1) // 2} pairs")


def test_qk_attribution_through_qk_norm():
    "A model with QK-norm (random weights, two layers): the norm of queries and keys, frozen, keeps the pair terms exact."
    from flax import nnx
    from sgatlin_nb.baselines import FFWConfig
    from sgatlin_nb.model import ModelConfig, Transformer
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, seq_len=16, head_dim=8, qk_norm=True,
                      ffw=FFWConfig('sgatlin', 32, 64, n_channels=2, k=3, d_key=8))
    model = Transformer(cfg, rngs=nnx.Rngs(3))
    _check_qk_sums(model, [5, 9, 2, 40, 7, 11], 1, 3, 1e-5)


def test_qk_attribution_refuses_bad_input_in_one_line(turtle):
    from sgatlin_nb.graph import qk_attribution
    model, tokenizer, _, _ = turtle
    ids = tokenizer.encode("The dog ran").ids
    for args, msg in [((4, 0, 1, 0), "layer must be an attention layer in [0, 4)"), ((0, 3, 1, 0), "head must be a head of the layer in [0, 3)"),
                      ((0, 0, len(ids), 0), f"query must be a position of the {len(ids)}-token prompt"),
                      ((0, 0, 0, len(ids)), f"key must be a position of the {len(ids)}-token prompt"),
                      ((0, 0, 0, 1), "key must be at or before the query")]:
        with pytest.raises(ValueError) as e:
            qk_attribution(model, ids, *args)
        assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)
