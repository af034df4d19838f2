"""Issue 18 item 4 on the real broker and real Spark (local[2]): 2,000 structurally mutated audit records
and stamps through the live audit consumer and Spark job (the small version of ``bench/fuzz_live.py``).

Every mutant is dead-lettered with the reference decoder's reason and counted (10% of the audit records
with a CreateTime far behind the watermark), nothing crashes (the audit consumer's producer-timeouts
reader included), and the valid traffic beside them is counted exactly by both.
"""

from __future__ import annotations

import pytest
from testbed.fuzz import run_live

pytestmark = pytest.mark.integration


def test_mutants_are_dead_lettered_and_counted_and_valid_traffic_stays_exact(bootstrap, tmp_path):
    r = run_live(bootstrap, tmp_path, records=1_000, stamps=1_000, seed=7, good_messages=2_000, timeout_s=240)
    print("phases (s):", {k: round(v) for k, v in r.seconds.items()})
    assert r.crashed == []
    assert sum(r.expected.values()) == 2_000
    assert r.dead_letters == r.expected, (r.dead_letters, r.expected)
    assert r.counted == r.expected
    assert r.bytes_kept
    assert sum(r.records_old.values()) > 0  # the watermark case is in the mix
    spark, truth = r.windows
    assert spark == truth == r.windows_exact > 0
    assert r.ok
