"Circuit databases: identity and version checks, reopening, interrupted builds, plain Parquet readers, several row groups, MoE and PEER gates, and the exact neighbour index at a larger size."
import dataclasses
import json
import os
import shutil

import duckdb
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from flax import nnx

from sgatlin_nb.baselines import FFWConfig
from sgatlin_nb.data import load_tokenizer, read_texts, train_tokenizer
from sgatlin_nb.model import Transformer
from sgatlin_nb.neighbours import NeighbourIndex
from sgatlin_nb.record import (SCHEMA_VERSION, CircuitDB, build_circuit_db, encode_documents,
                               gating_vectors, model_identity, pad_documents)
from sgatlin_nb.configs import PRESETS


@pytest.fixture(scope="module")
def tiny(data_dir):
    "A randomly initialized test-tiny model (one sgatlin layer, 2 channels of 256 neurons, k=4), its tokenizer and 10 stories."
    with pytest.MonkeyPatch.context() as mp:  # the data folder for these reads only: the worker's environment stays as it was
        if "SGATLIN_DATA_DIR" not in os.environ: mp.setenv("SGATLIN_DATA_DIR", str(data_dir))
        cfg = PRESETS["test-tiny"].model
        return Transformer(cfg, rngs=nnx.Rngs(0)), load_tokenizer("sgatlin"), list(read_texts("tinystories-valid", max_docs=10))


@pytest.fixture()
def db(tiny, tmp_path):
    model, tok, texts = tiny
    return build_circuit_db(model, tok, texts, tmp_path / "db", step=7, dataset="ten stories", batch_size=4, progress=False)


def _edit_manifest(path, **changes):
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


def test_counts_and_reopen(tiny, db):
    model, tok, texts = tiny
    docs = encode_documents(tok, texts, model.cfg.seq_len)
    assert db.n_rows == sum(map(len, docs)) == len(db.tokens)
    again = CircuitDB(db.path, expect={"model": model_identity(model, tok), "checkpoint_step": 7})
    assert again.manifest == db.manifest
    pd.testing.assert_frame_equal(again.tokens, db.tokens)
    for a, b in zip(again.gates(0), db.gates(0)):
        np.testing.assert_array_equal(a, b)
    assert db.manifest["counts"]["documents"] == 10 and db.manifest["dataset"]["name"] == "ten stories"


def test_other_model_is_refused(tiny, db):
    model, tok, _ = tiny
    other = Transformer(model.cfg, rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match=r"another model.*model\.params"):
        CircuitDB(db.path, expect={"model": model_identity(other, tok)})
    with pytest.raises(ValueError, match="checkpoint_step"):
        CircuitDB(db.path, expect={"checkpoint_step": 8})
    gpt2 = load_tokenizer("gpt2")
    with pytest.raises(ValueError, match="model.tokenizer"):
        CircuitDB(db.path, expect={"model": model_identity(model, gpt2)})


@pytest.mark.parametrize("changes, needle", [
    (dict(schema_version=SCHEMA_VERSION + 1), "schema version"),
    (dict(schema_version=None), "schema version"),
    (dict(format="something-else"), "not the manifest of a circuit database"),
])
def test_bad_manifest_is_refused(db, changes, needle):
    _edit_manifest(db.path, **changes)
    with pytest.raises(ValueError, match=needle):
        CircuitDB(db.path)


def test_missing_manifest_and_occupied_out(tiny, db, tmp_path):
    model, tok, texts = tiny
    (db.path / "manifest.json").unlink()
    with pytest.raises(ValueError, match="not a circuit database"):
        CircuitDB(db.path)
    with pytest.raises(ValueError, match="exists and is not a circuit database"):
        build_circuit_db(model, tok, texts, db.path, progress=False)


def test_overwrite_and_interrupted_build(tiny, tmp_path):
    model, tok, texts = tiny
    out = tmp_path / "db"
    mine = tmp_path / "db.partial"  # a folder of the user's under the name a build once used: never reused or removed
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    build_circuit_db(model, tok, texts[:3], out, progress=False)
    with pytest.raises(ValueError, match="overwrite=True"):
        build_circuit_db(model, tok, texts, out, progress=False)

    def broken():  # a stream that fails after a few documents
        yield from texts[:5]
        raise RuntimeError("disk gone")
    with pytest.raises(RuntimeError, match="disk gone"):
        build_circuit_db(model, tok, broken(), out, batch_size=2, overwrite=True, progress=False)
    assert CircuitDB(out).manifest["counts"]["documents"] == 3, "the old database survives a failed rebuild"
    assert not list(out.parent.glob(".db.*.partial")), "and the failed build leaves nothing behind"

    streamed = build_circuit_db(model, tok, iter(texts), out, batch_size=3, overwrite=True, progress=False)
    assert streamed.manifest["counts"]["documents"] == len(texts)
    assert (mine / "notes.txt").read_text() == "mine" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert not list(out.parent.glob(".db.*.partial"))


def test_plain_parquet_readers(db):
    p = db.path
    C, k = db.n_channels, db.k
    with duckdb.connect() as con:
        n, = con.sql(f"SELECT count(*) FROM '{p}/gates_layer0.parquet'").fetchall()[0]
        assert n == db.n_rows
        joined = con.sql(f"""
            SELECT t.row, t.token_id, g.indices, g.scores, t.top5_probs
            FROM '{p}/tokens.parquet' t JOIN '{p}/gates_layer0.parquet' g USING (row) ORDER BY t.row""").df()
        per_doc = con.sql(f"SELECT doc_id, count(*) AS n FROM '{p}/tokens.parquet' GROUP BY doc_id ORDER BY doc_id").df()
    idx, sc = db.gates(0)
    np.testing.assert_array_equal(np.stack(joined["indices"].to_numpy()).reshape(-1, C, k), idx)
    np.testing.assert_array_equal(np.stack(joined["scores"].to_numpy()).reshape(-1, C, k), sc)
    np.testing.assert_array_equal(per_doc.n.to_numpy(), db.documents.n_tokens.to_numpy())
    assert (np.stack(joined["top5_probs"].to_numpy()).sum(1) <= 1 + 1e-5).all()
    table = ds.dataset(p / "tokens.parquet").to_table()
    assert table.num_rows == db.n_rows and table.schema.field("top5_ids").type.list_size == 5
    assert len(pd.read_parquet(p / "documents.parquet")) == 10


def test_gating_matrix_columns(db):
    idx, sc = db.gates(0)
    G = db.gating_matrix(0, rows=[5, 6])
    assert G.shape == (2, db.n_channels * db.d_ffw)
    for i, r in enumerate([5, 6]):
        for c in range(db.n_channels):
            np.testing.assert_array_equal(G[i].toarray()[0, c * db.d_ffw + idx[r, c]], sc[r, c])


def _model_rows(model, docs, doc_ids):
    "The model's own logits and gates for some documents, and the database rows of their tokens."
    tokens_BxT, mask_BxT = pad_documents([docs[d] for d in doc_ids], len(doc_ids), model.cfg.seq_len, 0)
    logits_BxTxV, gates = nnx.jit(lambda m, x: m(x, return_gates=True))(model, jnp.asarray(tokens_BxT))
    b_N, t_N = np.nonzero(mask_BxT)
    starts = np.cumsum([0] + [len(d) for d in docs])
    return logits_BxTxV, gates, (b_N, t_N), starts[np.asarray(doc_ids)][b_N] + t_N


def test_row_groups(data_dir, tmp_path):
    # past the writer's 65,536 rows: 3,316 stories cut to 16-63 characters, and a 300-token BPE so that
    # the logits are cheap (300 tokens, not 8,192): about 85k rows
    stories = [*read_texts("tinystories-train", data_dir=data_dir), *read_texts("tinystories-valid", data_dir=data_dir)]
    texts = [t[:16 + i % 48] for i, t in enumerate(stories)]
    tok = train_tokenizer(stories[:100], vocab_size=300)
    cfg = dataclasses.replace(PRESETS["test-tiny"].model, vocab_size=tok.get_vocab_size(), n_layers=2)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    docs = encode_documents(tok, texts, cfg.seq_len)
    n = sum(map(len, docs))
    assert n > 1 << 16, "the test needs more rows than one row group holds"
    built = build_circuit_db(model, tok, texts, tmp_path / "db", batch_size=128, progress=False)
    db = CircuitDB(built.path, expect={"model": model_identity(model, tok)})  # reopened
    assert (db.n_rows, len(db.tokens), db.documents.n_tokens.sum()) == (n, n, n)

    # tokens and every layer's gates: the same row groups, more than one, holding rows 0..n-1 in order
    groups = {}
    for name in ["tokens", "gates_layer0", "gates_layer1"]:
        md = pq.ParquetFile(db.path / f"{name}.parquet").metadata
        groups[name] = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        rows = pq.read_table(db.path / f"{name}.parquet", columns=["row"]).column("row").to_numpy()
        np.testing.assert_array_equal(rows, np.arange(n), err_msg=name)
    sizes = groups["tokens"]
    assert len(sizes) > 1 and sum(sizes) == n and all(g == sizes for g in groups.values()), groups
    t = db.tokens
    np.testing.assert_array_equal(t.token_id, np.concatenate(docs))
    np.testing.assert_array_equal(t.doc_id, np.repeat(np.arange(len(docs)), [len(d) for d in docs]))
    np.testing.assert_array_equal(t.pos, np.concatenate([np.arange(len(d)) for d in docs]))

    # the documents on both sides of each row group boundary, and the first and last: gates and predictions as the model's
    firsts = np.cumsum(sizes)[:-1]
    pick = sorted({0, len(docs) - 1, *t.doc_id.iloc[firsts - 1], *t.doc_id.iloc[firsts]})
    logits, gates, (b_N, t_N), rows_N = _model_rows(model, docs, pick)
    assert np.isin(firsts, rows_N).all()  # the first row of every later group is among them
    for l in range(cfg.n_layers):
        idx, sc = db.gates(l)
        assert idx.shape == sc.shape == (n, cfg.ffw.n_channels, cfg.ffw.k)
        np.testing.assert_array_equal(idx[rows_N], np.asarray(gates[l].indices)[b_N, t_N])
        np.testing.assert_allclose(sc[rows_N], np.asarray(gates[l].scores)[b_N, t_N], rtol=1e-5, atol=1e-6)
    top5 = -np.sort(-np.asarray(jax.nn.softmax(logits, -1))[b_N, t_N], -1)[:, :5]
    np.testing.assert_allclose(np.stack(t.top5_probs.to_numpy()[rows_N]), top5, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("ffw", [
    FFWConfig("moe", 64, 64, n_experts=8, top_k=2),
    FFWConfig("peer", 64, 16 ** 2, n_channels=2, k=4, d_key=32),
], ids=["moe", "peer"])
def test_moe_and_peer_gates(tiny, tmp_path, ffw):
    # recorded as the model gates them, and the manifest says which layer it was
    _, tok, texts = tiny
    model = Transformer(dataclasses.replace(PRESETS["test-tiny"].model, ffw=ffw), rngs=nnx.Rngs(0))
    db = build_circuit_db(model, tok, texts[:4], tmp_path / "db", batch_size=4, progress=False)
    # an MoE is one channel choosing top_k of n_experts; PEER's heads each choose k of d_ffw experts
    C, k, F = (1, 2, 8) if ffw.kind == "moe" else (2, 4, 256)
    assert db.manifest["model"]["config"]["ffw"] == dataclasses.asdict(ffw)
    assert (db.n_channels, db.k, db.d_ffw) == (C, k, F)
    docs = encode_documents(tok, texts[:4], model.cfg.seq_len)
    _, gates, (b_N, t_N), rows_N = _model_rows(model, docs, [1, 3])
    for l in range(model.cfg.n_layers):
        idx, sc = db.gates(l)
        assert idx.shape == sc.shape == (db.n_rows, C, k)
        np.testing.assert_array_equal(idx[rows_N], np.asarray(gates[l].indices)[b_N, t_N])
        np.testing.assert_allclose(sc[rows_N], np.asarray(gates[l].scores)[b_N, t_N], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(sc.sum(-1), 1, rtol=1e-5)  # softmax weights per channel, not raw router scores
        own = gating_vectors(np.asarray(gates[l].indices)[b_N, t_N], np.asarray(gates[l].scores)[b_N, t_N], F)
        np.testing.assert_allclose(db.gating_matrix(l, rows=rows_N).toarray(), own.toarray(), rtol=1e-5, atol=1e-6)


def _brute(idx, sc, q_idx, q_sc, F, k, allowed):
    X = gating_vectors(idx, sc, F).toarray().astype(np.float64)
    Y = gating_vectors(q_idx, q_sc, F).toarray().astype(np.float64)
    dist = 1 - (Y @ X.T) / np.linalg.norm(Y, axis=1)[:, None] / np.linalg.norm(X, axis=1)[None, :]
    dist = np.clip(dist, 0, 2)
    dist[:, ~allowed] = np.inf
    order = np.lexsort((np.broadcast_to(np.arange(len(idx)), dist.shape), dist), axis=-1)[:, :k]
    return order, np.take_along_axis(dist, order, -1), dist


@pytest.mark.parametrize("positive", [True, False])
def test_neighbours_match_brute_force_at_scale(positive):
    rng = np.random.default_rng(3)
    N, C, k, F, Q = 20_000, 4, 8, 256, 300
    idx = np.argsort(rng.random((N, C, F)), -1)[..., :k].astype(np.int32)
    sc = rng.standard_normal((N, C, k)).astype(np.float32)
    if positive: sc = np.abs(sc)
    tokens = rng.integers(0, 50, N)
    index = NeighbourIndex.from_gates(idx, sc, F, tokens)
    q = rng.integers(0, N, Q)
    exclude = np.arange(1000, 3000)
    allowed = np.isin(tokens, np.arange(25)); allowed[exclude] = False
    rows, dist = index.query(idx[q], sc[q], 25, token_ids=np.arange(25), exclude_rows=exclude)
    ref_rows, ref_dist, all_dist = _brute(idx, sc, idx[q], sc[q], F, 25, allowed)
    np.testing.assert_allclose(dist, ref_dist, atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(all_dist, rows, -1), dist, atol=1e-5)
    assert allowed[rows].all()
    gaps = np.diff(ref_dist, axis=1)
    clear = np.concatenate([gaps[:, :1] > 1e-5, (gaps[:, 1:] > 1e-5) & (gaps[:, :-1] > 1e-5), gaps[:, -1:] > 1e-5], 1)
    np.testing.assert_array_equal(rows[clear], ref_rows[clear])  # where no near-tie, the very same rows
    self_rows, self_dist = index.query(idx[q], sc[q], 1)  # unfiltered: each circuit finds itself first
    assert (self_rows[:, 0] == q).all() and (self_dist[:, 0] < 1e-6).all()
