"""Shared Hypothesis profiles and byte-level mutations for the parser property tests.

QUICK runs in the default suite: few examples, derandomized so CI sees the same ones every time.
LONG runs only under `-m fuzz` (its tests are also marked `slow`): FLYWHEEL_FUZZ_EXAMPLES examples
per property, a fresh random seed each run (Hypothesis prints the seed of a failure).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_COMMON = {
    "deadline": None,
    # No example database: nothing is written into the checkout, and a run is only its seed.
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
QUICK = settings(derandomize=True, max_examples=25, **_COMMON)
LONG = settings(
    max_examples=int(os.environ.get("FLYWHEEL_FUZZ_EXAMPLES", "20000")), print_blob=True, **_COMMON
)


@st.composite
def mutate_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with a byte flipped, cut short, or a run of bytes inserted or deleted."""
    at = draw(st.integers(0, len(data)))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
    if kind == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data[:at] + data[at + draw(st.integers(1, 16)) :]
