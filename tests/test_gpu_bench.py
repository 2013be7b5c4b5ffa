"`benchmarks/gpu_bench.py --mini`: the GPU benchmark's own code at toy sizes on the CPU, so that it runs the day a GPU is lent."
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_bench_mini(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_bench.py"), "--mini", "--reps", "2", "--steps", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list(tmp_path.glob("gpu_bench_*_mini.json"))
    assert len(files) == 1, files
    res = json.loads(files[0].read_text())
    assert res["mini"] and res["platform"] == "cpu" and res["jax"] and res["skipped"] == [] and res["errors"] == []
    assert sorted(res["layer"]) == ["s4", "s6", "s8"]
    for rows in res["layer"].values():
        assert sorted(rows) == ["authors", "sgatlin", "sgatlin, CPU kernels", "swiglu twin"]
        assert rows["swiglu twin"]["vs_swiglu"] == 1.0
        for r in rows.values():
            assert r["us_per_token"] > 0 and abs(r["tokens_per_s"] * r["us_per_token"] - 1e6) < 1e-3 * 1e6
    assert sorted(res["step"]) == ["moe", "peer", "sgatlin", "swiglu twin"]
    assert all(r["tokens_per_s"] > 0 and r["steps"] >= 2 for r in res["step"].values())
    assert res["determinism"]["bit_identical"] and res["determinism"]["arrays"] > 10
    assert list(res["attention"]) == ["xla"] and res["attention"]["xla"]["tokens_per_s"] > 0  # cuDNN only on a GPU
    for line in ("layer s6 sgatlin", "step swiglu twin", "two gradient evaluations"):
        assert line in proc.stdout, proc.stdout
