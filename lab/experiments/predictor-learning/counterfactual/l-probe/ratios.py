"""Per-interval TCP loss ratios of the producer namespaces sampled by sample-tcp-counters.sh.

Usage: python ratios.py samples-default.txt [samples-game.txt ...]. Prints, every 10 s (5 samples),
the current meter's ratio (RetransSegs / OutSegs, ``audit_producer.network_stats.TcpRetransmitMeter``),
the data-segment ratio (RetransSegs / (TCPOrigDataSent + RetransSegs)) and the share of the segments
sent that carried new data (TCPOrigDataSent / OutSegs); ratios in percent.
"""

import sys
from pathlib import Path

HEADER = "t (s) | RetransSegs/OutSegs | RetransSegs/(TCPOrigDataSent+RetransSegs) | TCPOrigDataSent/OutSegs"

for name in sys.argv[1:]:
    fields = [line.split() for line in Path(name).read_text().splitlines()]
    rows = [(float(r[0]), *map(int, r[2:6])) for r in fields if len(r) >= 6]
    print(name, "|", HEADER)
    t0 = rows[0][0]
    for a, b in zip(rows[::5], rows[5::5], strict=False):
        out, retrans, orig = b[1] - a[1], b[2] - a[2], b[3] - a[3]
        if out >= 50:
            now, data = 100 * retrans / out, 100 * retrans / (orig + retrans)
            print(f"  {a[0] - t0:5.0f} | {now:5.1f} | {data:5.1f} | {orig / out:.2f}")
