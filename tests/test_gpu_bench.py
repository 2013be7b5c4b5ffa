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


def test_gpu_profile_mini(tmp_path):
    "`benchmarks/gpu_profile.py --mini`: every part of the GPU window's profile at toy sizes, the GPU kernels interpreted."
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    # one traced step a design (3 on a GPU): on a CPU the interpreted kernels fill the trace with events, and the
    # reduction to totals is the same code for any count
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_profile.py"), "--mini", "--reps", "2", "--steps", "2",
                           "--profile-steps", "1", "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_profile_cpu_mini.json").read_text())
    assert res["mini"] and res["skipped"] == [] and res["errors"] == [], (res["skipped"], res["errors"])
    steps = res["step"]
    assert sorted(steps) == sorted(["sgatlin", "sgatlin, wide kernels", "sgatlin, as timed", "swiglu twin"])
    assert all(r["s_per_step"] > 0 and r["loss"] > 0 for r in steps.values())
    assert steps["swiglu twin"]["vs_twin"] == 1.0
    # the three sgatlin designs train the same model on the same rows: the same loss but for rounding (the timed design
    # read its tables in float32, the others in bfloat16)
    for name in ("sgatlin, wide kernels", "sgatlin, as timed"):
        assert abs(steps[name]["loss"] / steps["sgatlin"]["loss"] - 1) < 1e-2, (name, steps[name]["loss"], steps["sgatlin"]["loss"])
    for name in ("sgatlin", "sgatlin, wide kernels"):  # the profiler's trace reduced to totals
        prof = res["profile"][name]
        assert prof["steps"] == 1 and prof["kernels"] and prof["total_us"] >= prof["kernels"][0]["us"] > 0
    k = res["kernels"]
    assert all(d < 1e-5 for d in k["wide_vs_tiles"].values()), k["wide_vs_tiles"]  # wide tiles and tiles give the same sums
    assert k["rows"]["structured"]["distinct"] < k["rows"]["uniform"]["distinct"]   # structured rows concentrate
    timed = [n for n in k if n not in ("rows", "wide_vs_tiles")]
    assert len(timed) == 2 * 2 * 7 and all(k[n]["us"] > 0 for n in timed)
    assert sorted(res["depth 1"]) == ["sgatlin", "swiglu twin"] and res["depth 1"]["sgatlin"]["n_layers"] == 1
    assert sorted(res["decode"]) == sorted(f"{m}, batch {b}" for m in ("sgatlin", "swiglu twin", "moe") for b in (1, 64))
    assert all(r["tokens_per_s"] > 0 for r in res["decode"].values())
    pred = res["predicted"]  # the cost model's predictions beside the figures (toy sizes: only that the path runs)
    assert sorted(pred["step"]) == sorted(["sgatlin", "sgatlin, wide kernels", "sgatlin, as timed"])
    assert all(r["s_per_step"] > 0 and r["measured_s"] == steps[n]["s_per_step"] for n, r in pred["step"].items())
    assert len(pred["kernels"]) == 2 * 4 and all(us > 0 for us in pred["kernels"].values())
