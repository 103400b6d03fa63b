"""Fuzzing the delegate: mutated options blobs and mutated single-op models must never crash the process.

The loop runs in a subprocess (tests/native/fuzz_worker.py): a segfault or abort shows up as a negative
return code here instead of killing pytest.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("fuzz_worker.py")


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_options_and_models_never_crash(seed):
    proc = subprocess.run(
        [sys.executable, str(WORKER), "--seed", str(seed), "--blobs", "3000", "--models", "240"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"fuzz worker died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    tally = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tally["blobs"] == 3000
    assert tally["models"] == 240
    # Every model ends in exactly one of the two expected outcomes ...
    assert tally["declined"] + tally["claimed_ran"] == 240, tally
    # ... and the mutations are neither all rejected nor all harmless.
    assert tally["declined"] >= 50 and tally["claimed_ran"] >= 20, tally
    assert 0 < tally["blobs_accepted"] < tally["blobs"]
