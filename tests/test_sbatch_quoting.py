"""A run folder or notebook name is data in the sbatch script, never shell code: the script, run by bash with a
stand-in `srun`, creates the folder by its literal name and executes nothing written in it."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from sgatlin_nb.slurm import sbatch_script

ROOT = Path(__file__).resolve().parents[1]


def test_a_shell_expression_in_the_run_folder_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    run_dir = tmp_path / f"runs $(touch {marker}) `touch {marker}` ;touch {marker}"
    script = sbatch_script(ROOT / "nbs" / "91_slurm.ipynb", [{"x": 1}], run_dir=run_dir, job_name="q", setup="true")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "srun"  # stands in for Slurm: records its arguments and succeeds
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/srun.args"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "1"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    res = subprocess.run(["bash", "-c", script + '\necho "CACHE=$JAX_COMPILATION_CACHE_DIR"'], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), "a command written in the run folder's name ran"
    assert (run_dir / "0" / "done").exists()  # the folder exists under its literal name
    assert f"CACHE={run_dir}/jax_cache" in res.stdout
    args = (bin_dir / "srun.args").read_text().splitlines()
    assert args[-3:] == [f"{run_dir}/0", "{x: 1}", str(ROOT / "nbs" / "91_slurm.ipynb")], args[-3:]


def test_a_line_break_in_a_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="line break"):
        sbatch_script(ROOT / "nbs" / "91_slurm.ipynb", [{"x": 1}], run_dir=tmp_path / "a\nrm -rf b", job_name="q")
