"""Hypothesis settings for the property tests of every parser of untrusted text.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` (the default: a fixed seed and example count, so a run is
reproducible and takes a few seconds per test on two shared cores; no deadline, since a loaded machine makes
timings meaningless), ``fuzz`` (random, 20x the examples: run it locally or nightly to look for new failures).
Hypothesis prints the failing example (and its ``@reproduce_failure`` blob) when a property breaks.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
