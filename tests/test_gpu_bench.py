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
        for r in rows.values():  # each layer's time over its SwiGLU twin's, as printed
            assert abs(r["vs_swiglu"] * rows["swiglu twin"]["us_per_token"] - r["us_per_token"]) < 1e-6 * r["us_per_token"], r
            assert r["us_per_token"] > 0 and abs(r["tokens_per_s"] * r["us_per_token"] - 1e6) < 1e-3 * 1e6
    assert sorted(res["step"]) == ["moe", "peer", "sgatlin", "sgatlin, scanned", "swiglu twin"]
    assert res["step"]["sgatlin, scanned"]["loss"] == res["step"]["sgatlin"]["loss"]  # the same first steps, scanned or not
    assert all(r["tokens_per_s"] > 0 and r["steps"] >= 2 for r in res["step"].values())
    assert res["determinism"]["bit_identical"] and res["determinism"]["arrays"] > 10 and res["determinism"]["differing"] == []
    assert list(res["attention"]) == ["xla"] and res["attention"]["xla"]["tokens_per_s"] > 0  # cuDNN only on a GPU
    # every field a GPU run prints, marked where it needs a GPU
    v = res["versions"]
    assert v["jaxlib"] == res["jaxlib"] and v["cudnn"] == v["cuda_runtime"] == "not on a GPU" and v["scatter_fix"] == "not needed"
    sc = res["scatter"]
    assert sc["atomic adds without the fix"] == "not on a GPU" and sc["most_repeated_id_count"] > 10 and sc["max_abs_difference"] < 1e-3
    assert sorted(k for k, r in sc.items() if isinstance(r, dict)) == sorted(
        f"{how}, {ids} ids" for how in ("atomic adds", "sorted segment sum") for ids in ("real", "uniform"))
    for r in res["step"].values():
        assert r["attention"] == "xla" and r["mfu"] == r["peak_bytes_so_far"] == "not on a GPU" and r["estimate_bytes"] > 0
    assert sorted(res["kernels"]) == ["gate backward", "gather_combine", "gather_dot", "table gradient"]
    for name, r in res["kernels"].items():
        assert r["GPU kernels"]["us"] > 0 and r["CPU kernels"]["us"] > 0 and r["max_abs_difference"] <= 2 ** -7 * r["largest_output"], (name, r)  # a bfloat16 rounding at most
    # in the order that lets a short time box keep the most important figures
    lines = ["versions jax", "scatter-add [", "step sgatlin", "step swiglu twin", "kernel gather_dot", "layer s6 sgatlin",
             "attention xla", "two gradient evaluations"]
    at = [("\n" + proc.stdout).find("\n" + l) for l in lines]  # each at the start of a line
    assert all(i >= 0 for i in at) and at == sorted(at), (at, proc.stdout)
