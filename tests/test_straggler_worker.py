"""straggler_worker: the slow batches the finding names are the ones holding the slow
samples (checks beyond the catalog entry's, on the same run)."""

from __future__ import annotations

import pytest

from doctor_run import catalog, run_entry

# The catalog entry's run, reused: nothing beside it, as the entry.
pytestmark = [pytest.mark.scenario, pytest.mark.alone]


def test_slow_samples_named_are_the_slow_ones(tmp_path):
    r = run_entry(catalog.by_name("straggler_worker"), tmp_path)
    ev = r.finding("straggler_worker")["evidence"]
    # The slow batches' samples, from the workers' side logs: each holds a multiple of 50.
    indices = [int(x) for x in ev["slow_sample_indices"].replace(", ...", "").split(", ")]
    batches = {i // 4 for i in indices}  # batch_size=4, sequential sampler
    assert batches and all(any(s % 50 == 0 for s in range(b * 4, b * 4 + 4)) for b in batches)
