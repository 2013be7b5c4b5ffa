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


def test_graph_file_is_read_by_circuit_tracer(tmp_path):
    models = circuit_tracer_models()
    res = run_sgatlin(["graph", "The turtle was", "--target", " slow", "--prune", "none", "--out", str(tmp_path / "g")], None)
    assert res.returncode == 0, res.stderr[-2000:]
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
    # the library's own helper for a feature node gives our neurons' ids and feature numbers
    neuron = next(n for n in graph.nodes if n.feature_type == "cross layer transcoder")
    layer, feat, pos = map(int, neuron.node_id.split("_"))
    same = models.Node.feature_node(layer, pos, feat, activation=neuron.activation)
    assert (same.node_id, same.feature, same.jsNodeId) == (neuron.node_id, neuron.feature, neuron.jsNodeId)


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
