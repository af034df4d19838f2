"""The delivery-report callbacks of the audited producer: each report counted in its window's list.

Every (window, inner producer) pair has its own callbacks
(:func:`~audit_producer.window_counts.window_counter`), bound to the window's count list and passed
with each of its messages, so a report needs no lookup. A
failed report is also handed on, with the first sequence number of the inner producer that failed it,
so that autotune can judge a configuration on probation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message

from audit_producer.window_counts import (
    ACKED,
    CB_GENERATION,
    COUNT_CB,
    DIRTY,
    REPORT_CB,
    DeliveryCallback,
    count_failure,
    window_counter,
)


class DeliveryReports:
    """Counts the audited producer's delivery reports in its windows, then passes them on.

    Args:
        windows: The open windows' count lists by (topic, window start in ms), shared with the producer.
        window_ms: Window length, ms.
        then: The application's delivery callback, called after counting (None: none).
        on_failure: Called as ``on_failure(generation, err)`` after a failed delivery is counted;
            ``generation`` is the first sequence number given to the inner producer that failed the
            message, a lower bound of its own.
    """

    def __init__(
        self,
        windows: dict[tuple[str, int], list[Any]],
        window_ms: int,
        then: DeliveryCallback | None,
        on_failure: Callable[[int, KafkaError], None],
    ) -> None:
        self.windows = windows
        self.window_ms = window_ms
        self.then = then
        self._on_failure = on_failure

    def bind(self, w: list[Any], generation: int) -> None:
        """Give window ``w`` its callbacks for the inner producer whose first sequence is ``generation``."""
        if w[CB_GENERATION] == generation:
            return
        w[COUNT_CB] = count = window_counter(w, generation, None, self._count_failure)
        w[REPORT_CB] = (
            count if self.then is None else window_counter(w, generation, self.then, self._count_failure)
        )
        w[CB_GENERATION] = generation

    def _count_failure(self, w: list[Any], generation: int, err: KafkaError, msg: Message) -> None:
        count_failure(w, err, msg)
        self._on_failure(generation, err)

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """Count a report of a message produced without a window's callback, pass it on.

        The inner producers' config ``on_delivery``. No message goes without a window's own callback;
        should one, only a delivered report is counted: a failed one carries no timestamp (librdkafka
        gives -1), so it cannot be placed in a window.
        """
        ts = msg.timestamp()[1]
        w = self.windows.get((msg.topic(), ts - ts % self.window_ms))
        if err is None and w is not None:
            w[ACKED] += 1
            w[DIRTY] = 1
        if self.then is not None:
            self.then(err, msg)


__all__ = ["DeliveryReports"]
