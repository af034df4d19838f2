"""A deadline for blocking librdkafka transactional calls.

librdkafka can block in ``send_offsets_to_transaction`` past its timeout when the group coordinator
goes away (confluentinc/librdkafka issues #5456 and #5511, open as of 2.16). The call cannot be
interrupted, so it runs in a helper thread; when the deadline passes the caller gets
:class:`TransactionHungError`, abandons that producer instance, and starts a new one with the same
``transactional.id`` (its ``init_transactions`` fences the stuck one and aborts its transaction).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kafka_plumbing.errors import KafkaAuditError

T = TypeVar("T")


class TransactionHungError(KafkaAuditError):
    """A transactional call did not return by its deadline (see the module docstring)."""


def call_with_deadline(fn: Callable[..., T], *args: Any, deadline_s: float) -> T:
    """Run ``fn(*args)`` in a helper thread and return its result, or raise its exception.

    Raises:
        TransactionHungError: if it has not returned after ``deadline_s`` seconds (it keeps running).
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"txn-call-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    if not done.wait(deadline_s):
        raise TransactionHungError(f"{getattr(fn, '__name__', fn)} still blocked after {deadline_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]
