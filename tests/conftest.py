import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # tests/test_hf_truth_harness.py checks the hook below

# One torch (OpenMP) thread per test process unless the caller says otherwise: pytest-xdist
# already runs a worker per core, and each worker's torch starting a thread per core too
# left idle threads spinning on a machine they oversubscribed (tests/test_cli_measure.py,
# 2-core VM under load: 201 s with the default threads, 85 s with one). Read by torch
# when it is first imported, so it is set before any test imports it; the `kvcalc measure`
# children the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# tests/torch_reference.py and tests/hf_truth.py are imported as plain modules by the tests.
sys.path.insert(0, str(Path(__file__).parent))

# Hypothesis profiles: a quick run where people work, a thorough one in CI (.ci/run sets
# HYPOTHESIS_PROFILE=ci). Properties that build torch modules or whole sweeps keep a
# count of their own in both.
try:
    from hypothesis import settings as _settings

    _settings.register_profile("dev", max_examples=50, deadline=None)
    _settings.register_profile("ci", max_examples=1000, deadline=None, print_blob=True)
    _settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
except ImportError:  # hypothesis is in the test extra; the properties skip without it
    pass

def pytest_configure(config):
    # Here as well as in pyproject.toml: CI's no-torch tier runs a copy of tests/ alone.
    for line in ("gpu: needs a CUDA device (skipped without one)",
                 "slow: takes more than a few seconds (runs real decode steps or ranks)",
                 "vllm: needs vLLM itself (skipped unless it imports; README: the vLLM tier)",
                 "xdist_group: tests pytest-xdist runs in one worker (--dist loadgroup)"):
        config.addinivalue_line("markers", line)


_harness_failure: list[str] = []  # the test that reported the broken truth harness


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A broken transformers truth harness (hf_truth.HarnessBroken: a release changed
    how a model takes or returns its cache) fails the first test that meets it, saying
    so; the others are skipped, not reported as kvcalc errors one by one."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or call.when != "call":
        return
    broken = getattr(sys.modules.get("hf_truth"), "HarnessBroken", None)
    if broken is None or not call.excinfo.errisinstance(broken):
        return
    if not _harness_failure:
        _harness_failure.append(item.nodeid)
        report.longrepr = (f"the transformers truth harness is broken, so no truth test can "
                           f"judge kvcalc: {call.excinfo.value}")
        return
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0,
                       f"Skipped: truth harness broken (see {_harness_failure[0]})")
