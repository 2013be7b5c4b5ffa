import contextlib
import io
import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


CHROMIUM = os.environ.get("SGATLIN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SGATLIN_CHROMEDRIVER", "/usr/bin/chromedriver")


def start_chromium(profile_dir, width: int = 1280, loopback: bool = False):
    """Headless Chromium from Debian's packages, driven by its chromedriver, with the network cut off; the page's
    uncaught errors collect in `window.__pageErrors`. Fails (never skips) when Chromium is missing. With `loopback`, it
    still reaches 127.0.0.1 (a local server under test); nothing else resolves."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    for exe, pkg, var in ((CHROMIUM, "chromium", "SGATLIN_CHROMIUM"), (CHROMEDRIVER, "chromium-driver", "SGATLIN_CHROMEDRIVER")):
        if not os.access(exe, os.X_OK):
            pytest.fail(f"no {pkg} at {exe}: apt-get install {pkg} (scripts/test.sh does) or set {var}")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                "--host-resolver-rules=MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if loopback else ""),  # offline, like CI: a page that needs a CDN fails here
                f"--user-data-dir={profile_dir}"):
        opts.add_argument(arg)
    # An explicit driver path: Selenium Manager stays out of it and downloads nothing.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_script_timeout(120)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        window.__pageErrors = [];
        addEventListener('error', e => __pageErrors.push(String(e.error?.stack ?? e.message)));
        addEventListener('unhandledrejection', e => __pageErrors.push(String(e.reason?.stack ?? e.reason)));"""})
    return driver


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = os.environ.get("SGATLIN_DATA_DIR") or str(ROOT / "data")  # the samples the repository carries
    if not Path(d, "tinystories").is_dir():
        pytest.fail(f"the test data are missing: {d} has no tinystories/ (SGATLIN_DATA_DIR names another folder)")
    return Path(d)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One `SGATLIN_CACHE` folder for the whole test session, both xdist workers included: a paper page's `run_full`
    path trains its model there once (`cached_run` and `reference_circuit_db` hold a file lock while they build), and
    every later page run reads it, as in a user's cache. The paper pipeline's Slurm jobs and JupyterLab's pages share it."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sgatlin_cache"
    path.mkdir(exist_ok=True)
    return path


def sgatlin_cmd() -> list[str]:
    "The installed console script, else the module."
    exe = Path(sys.executable).parent / "sgatlin"
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from sgatlin_nb.cli import main; sys.exit(main())"]


def run_sgatlin(args, data_dir, timeout=600, extra_env=None, cwd=None) -> subprocess.CompletedProcess:
    """`sgatlin ARGS` in a subprocess with SGATLIN_DATA_DIR=`data_dir`; `None` runs it as in a new shell (the variable
    unset: the repository's samples), `""` with no data folder at all."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(extra_env or {})}
    if data_dir is None:
        env.pop("SGATLIN_DATA_DIR", None)
    else:
        env["SGATLIN_DATA_DIR"] = str(data_dir)
    return subprocess.run(sgatlin_cmd() + list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def run_in_process(args, data_dir, extra_env=None, cwd=None) -> subprocess.CompletedProcess:
    """`run_sgatlin`'s call made in this process, for refusals: `main(ARGS)` as the console script calls it, with the same
    environment (set for the call, then restored), in `cwd`, and file descriptors 1 and 2 captured (what C code and
    child processes write is caught too). No interpreter start-up and no import per call; a command that ends the
    process (SystemExit) gives its status."""
    import tempfile
    from sgatlin_nb.cli import main
    env = {"JAX_PLATFORMS": "cpu", **(extra_env or {})}
    env["SGATLIN_DATA_DIR"] = None if data_dir is None else str(data_dir)
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    sys.stdout.flush(); sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    py_out, py_err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            for k, v in env.items():
                if v is None: os.environ.pop(k, None)
                else: os.environ[k] = v
            if cwd is not None: os.chdir(cwd)
            os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
            with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_err):  # Python's own writes
                try: status = main(list(args))
                except SystemExit as e: status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            os.dup2(saved_fds[0], 1); os.dup2(saved_fds[1], 2)
            for fd in saved_fds: os.close(fd)
            os.chdir(saved_cwd)
            for k, v in saved_env.items():
                if v is None: os.environ.pop(k, None)
                else: os.environ[k] = v
        out.seek(0); err.seek(0)
        return subprocess.CompletedProcess(list(args), status, out.read().decode(errors="replace") + py_out.getvalue(),
                                           err.read().decode(errors="replace") + py_err.getvalue())


def snapshot(folder) -> dict:
    "SHA-256 of every file under `folder` but the lock (it names the last process that held it), by relative path."
    import hashlib
    folder = Path(folder)
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="session")
def slurm() -> str:
    "A one-node Slurm on this machine (`scripts/slurm.sh start`); the test fails, never skips, when it cannot start."
    res = subprocess.run(["bash", str(ROOT / "scripts" / "slurm.sh"), "start"], capture_output=True, text=True, timeout=900)
    if res.returncode:
        pytest.fail(f"scripts/slurm.sh start failed (status {res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()


def slurm_delays() -> dict:
    """How long the running cluster makes a requeued job wait, read from `scontrol show config` (Slurm's defaults where a
    setting is absent): `requeue_s`, cred_expire + 1 seconds before a requeued job may start again (AuthInfo; default
    120), and `sched_s`, the seconds between the scheduler's passes (SchedulerParameters sched_interval; default 60).
    The tests derive their waits from these, so a cluster started elsewhere with other settings only makes them longer."""
    res = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"scontrol show config failed: {res.stderr[-2000:]}"
    def setting(name: str, option: str, default: int) -> int:
        line = re.search(rf"^{name}\s*=\s*(.*)$", res.stdout, re.M)
        value = re.search(rf"\b{option}=(\d+)", line[1]) if line else None
        return int(value[1]) if value else default
    return {"requeue_s": setting("AuthInfo", "cred_expire", 120) + 1,
            "sched_s": setting("SchedulerParameters", "sched_interval", 60)}


# scripts/test.sh runs pytest on two workers (pytest-xdist, `-n 2 --no-loadscope-reorder`) with the scheduler below:
# each module's tests stay together on one worker, in file order, so a module's fixtures are built once; the modules
# that submit jobs form one unit, since they queue on the same one-node cluster. Units start slowest first (as
# measured in CI), so the longest, the miniature paper pipeline, does not start last.
SLURM_MODULES = ("test_paper_pipeline", "test_slurm")
SLOWEST_FIRST = ("slurm", "test_jupyterlab", "test_gpu_lowering", "test_bad_input", "test_demo", "test_commands", "test_docs",
                 "test_multiprocess", "test_train_resume", "test_multidevice")


def _unit(module: str) -> str:
    return "slurm" if module in SLURM_MODULES else module


# Two tiers (DESIGN's "Tests and speed"). The full tier is the README's test command, `bash scripts/test.sh`, which CI
# runs. The fast tier, `bash scripts/test.sh --fast` (or `pytest -m "not slow"` in a ready environment), leaves out
# the tests marked `slow` here: whole modules that start clusters, browsers or many processes, and single tests that
# train or submit for long. Each entry says why; a test is named by its module, or its module and function name.
SLOW = {
    "test_paper_pipeline": "every paper page's miniature submitted to the local Slurm (about 13 minutes)",
    "test_slurm": "jobs on the local Slurm, requeues and stalls",
    "test_multiprocess": "two Slurm tasks forming one run",
    "test_jupyterlab": "pages run in JupyterLab in Chromium",
    "test_docs": "every executed page rendered in Chromium (needs the executed notebooks)",
    "test_gpu_lowering": "every paper preset lowered for CUDA on 8 forced devices",
    "test_gpu_bench": "the GPU scripts' every path in miniature",
    "test_multidevice": "every kind trained data parallel on forced devices",
    "test_demo": "the README's main command, whole",
    "test_hf": "torch exports of every kind, compared with JAX",
    "test_umap_cache": "two processes drawing UMAP maps, the first compiling numba's functions",
    "test_train_resume::test_mirrored_run_killed_then_resumed_on_an_empty_node": "kill, mirror and resume processes",
    "test_train_resume::test_sigterm_saves_the_step_reached_then_resume_matches": "signalled training processes",
    "test_train_resume::test_sigkill_then_resume_matches_uninterrupted_run": "signalled training processes",
    "test_commands::test_command_example_runs_and_writes": "each README command example as a process",
    "test_commands::test_readme_eval_and_sample_run_as_shown": "the README's eval and sample as processes",
    "test_commands::test_train_fsdp_batch_size_from_the_shell": "a training process on forced devices",
    "test_tasks::test_the_harness_and_score_tasks_agree_on_every_log_likelihood": "lm-evaluation-harness over every task",
    "test_reference::test_the_script_reproduces_the_first_logged_losses": "the reference model's training script",
    "test_routing_load::test_four_devices_micro_batches_and_remat": "training on 4 forced devices, load counted and not",
}


def _slow(item) -> bool:
    module = Path(str(item.fspath)).stem
    return module in SLOW or f"{module}::{item.originalname}" in SLOW


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the fast tier (pytest -m 'not slow'); tests/conftest.py's SLOW says why")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow(item): item.add_marker(pytest.mark.slow)
    rank = {u: i for i, u in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(_unit(Path(str(item.fspath)).stem), len(rank)))  # stable: file order within


def pytest_xdist_make_scheduler(config, log):
    "xdist's scheduling by scope, with one scope per module (the Slurm modules sharing one)."
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(Path(nodeid.split("::", 1)[0]).stem)

    return ByModule(config, log)


# Where the time goes, printed at the end of every run: each module's seconds (setup, call and teardown summed) and each
# xdist worker's, so that the units' order above and the two tiers can be set from measurements; and each module's CPU
# seconds (user and system, of the worker and of every process it started and waited for: the Slurm jobs, which
# slurmd starts, are not counted), since on 2 busy cores the CPU a module uses, not its wall time, is what it costs.
_SECONDS: dict = {}
_CPU_AT = [None]


def _cpu_now() -> float:
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def pytest_collection_finish(session):
    _CPU_AT[0] = _cpu_now()  # from here on, each phase of each test is charged the CPU used since the last


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    now = _cpu_now()
    outcome.get_result().user_properties.append(("cpu_s", now - (_CPU_AT[0] or now)))
    _CPU_AT[0] = now


def pytest_runtest_logreport(report):
    module = Path(report.nodeid.split("::", 1)[0]).stem
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    for key in (("module", module), ("worker", worker)):
        _SECONDS[key] = _SECONDS.get(key, 0.0) + report.duration
    cpu = sum(v for k, v in report.user_properties if k == "cpu_s")
    _SECONDS[("cpu", module)] = _SECONDS.get(("cpu", module), 0.0) + cpu


def pytest_terminal_summary(terminalreporter):
    if not _SECONDS: return
    tr = terminalreporter
    tr.section("seconds per module and per worker (setup, call and teardown)")
    for kind in ("worker", "module"):
        rows = sorted(((s, name) for (k, name), s in _SECONDS.items() if k == kind), reverse=True)
        tr.write_line(f"{kind}s: " + ", ".join(f"{name} {s:.0f}" for s, name in rows))
    rows = sorted(((s, name) for (k, name), s in _SECONDS.items() if k == "cpu"), reverse=True)
    tr.write_line(f"CPU seconds, modules (Slurm's jobs not counted): total {sum(s for s, _ in rows):.0f}; "
                  + ", ".join(f"{name} {s:.0f}" for s, name in rows))
