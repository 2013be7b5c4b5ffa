"The interpretability commands run end to end on a freshly trained tiny run and write their files."
import json

from conftest import run_sgatlin


def test_record_neighbours_usage_commands(tmp_path, data_dir):
    run = tmp_path / "run"
    res = run_sgatlin(["train", "--config", "test-tiny", "--out", str(run), "--steps", "10", "--quiet"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]

    db = tmp_path / "db"
    res = run_sgatlin(["record", "--run", str(run), "--out", str(db), "--n-docs", "12", "--quiet"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    manifest = json.loads((db / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == 12 and manifest["counts"]["tokens"] > 12
    assert (db / "tokens.parquet").exists() and (db / "gates_layer0.parquet").exists()

    res = run_sgatlin(["neighbours", "The big dog named Max had a red collar.", "--run", str(run), "--db", str(db),
                       "--out", str(tmp_path / "nb"), "--layer", "0", "--k", "3", "--quiet"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "nb" / "neighbours.csv").exists() and (tmp_path / "nb" / "neighbours.html").exists()

    res = run_sgatlin(["usage", "--out", str(run), "--report", str(tmp_path / "usage"), "--n-stories", "16",
                       "--n-neurons", "32"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "usage" / "summary.json").exists()

    # a database of another model is refused with one line
    other = tmp_path / "other"
    assert run_sgatlin(["train", "--config", "test-tiny", "--out", str(other), "--steps", "5", "--quiet"], data_dir).returncode == 0
    res = run_sgatlin(["neighbours", "The dog.", "--run", str(other), "--db", str(db), "--out", str(tmp_path / "nb2"),
                       "--quiet"], data_dir)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-2000:]
