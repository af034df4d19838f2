"""Which producer configuration each sequence number ran with, so a window knows its configurations.

An autotuned producer changes its configuration between two ``produce()`` calls (docs/DESIGN.md,
"Autotuned producer"); sequence numbers (the audit stamp, invariant 3) are consecutive across the
change. So the configuration history is a short list of ``(first sequence, configuration)`` entries and
a window, which knows the first and last sequence numbers it counted, ran with every configuration
whose sequence range meets ``[first_sequence, last_sequence]``. The per-message hot path writes nothing
for this; the lookups happen when snapshots are emitted.
"""

from __future__ import annotations

from bisect import bisect_right

from audit_record import ProducerConfig


class ConfigHistory:
    """Configurations by the first sequence number that ran with each, oldest first.

    Args:
        initial: The configuration the producer starts with (from sequence number 1).
    """

    def __init__(self, initial: ProducerConfig) -> None:
        self._starts: list[int] = [0]
        self._configs: list[ProducerConfig] = [initial]

    def __len__(self) -> int:
        return len(self._configs)

    @property
    def current(self) -> ProducerConfig:
        """The configuration that messages produced from now on run with."""
        return self._configs[-1]

    def change(self, first_sequence: int, config: ProducerConfig) -> None:
        """Record that messages from sequence number ``first_sequence`` on run with ``config``.

        A change at the same sequence number as the previous one (nothing produced in between)
        replaces it.

        Raises:
            ValueError: if ``first_sequence`` is before the newest entry's.
        """
        if first_sequence < self._starts[-1]:
            raise ValueError(f"sequence {first_sequence} is before the newest change at {self._starts[-1]}")
        if first_sequence == self._starts[-1]:  # nothing ran with the newest entry: replace it
            self._configs[-1] = config
            if len(self._configs) > 1 and self._configs[-2] == config:
                self._starts.pop()
                self._configs.pop()
        elif config != self._configs[-1]:
            self._starts.append(first_sequence)
            self._configs.append(config)

    def configs_between(self, first_sequence: int, last_sequence: int) -> list[ProducerConfig]:
        """Return the distinct configurations of sequence numbers ``first_sequence..last_sequence``.

        In order of first use; the first is the one ``first_sequence`` ran with.
        """
        if len(self._configs) == 1:
            return [self._configs[0]]
        lo = max(0, bisect_right(self._starts, first_sequence) - 1)
        hi = max(lo, bisect_right(self._starts, last_sequence) - 1)
        out: list[ProducerConfig] = []
        for config in self._configs[lo : hi + 1]:
            if config not in out:
                out.append(config)
        return out

    def forget_before(self, sequence: int) -> None:
        """Drop entries no sequence number from ``sequence`` on can need (the oldest open window's first)."""
        keep = max(0, bisect_right(self._starts, sequence) - 1)
        if keep:
            del self._starts[:keep]
            del self._configs[:keep]


__all__ = ["ConfigHistory"]
