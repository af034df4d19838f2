"""The audited producer's unaudited methods: the rest of ``confluent_kafka.Producer``'s, forwarded.

Also ``len()`` (the messages its inner producers hold) and ``with`` (which closes it).

Not by ``__getattr__``: a class with ``__getattr__`` gets a ``slot_tp_getattr_hook``, and CPython then
specialises no attribute access on its instances, so every ``self._x`` on the produce() hot path would
take the generic lookup (about 1,000 machine instructions per produce() in all, a third of a bare
produce). Each method is set on the class instead, once, when the class is created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from confluent_kafka import Producer

if TYPE_CHECKING:
    from audit_producer.draining import Draining


def _forward(name: str) -> Callable[..., Any]:
    """Return a method that calls ``name`` of the running inner producer (looked up at each call)."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._producer, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``confluent_kafka.Producer.{name}`` of the running inner producer (unaudited)."
    return method


class InnerProducerMethods:
    """A base class: its subclasses get every public ``confluent_kafka.Producer`` method they lack.

    Each forwards to the subclass instance's ``_producer`` (the running inner producer, read at each
    call, so a swapped inner producer is used at once). No state of its own (empty ``__slots__``).
    """

    __slots__ = ()

    if TYPE_CHECKING:  # for type checkers only: at run time the methods are set on the class (no __getattr__)
        _producer: Producer
        _draining: Draining

        def __getattr__(self, name: str) -> Any:
            """Any other ``confluent_kafka.Producer`` method, forwarded to the running inner producer."""

        def close(self) -> None:
            """Flush, send the final snapshots and close the clients (the subclass's)."""

    def __len__(self) -> int:
        """Return the messages queued or in flight, replaced inner producers included."""
        return len(self._producer) + (self._draining.in_flight() if self._draining else 0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Set on ``cls`` a forwarding method per public ``confluent_kafka.Producer`` one it lacks."""
        super().__init_subclass__(**kwargs)
        for name in dir(Producer):
            if not name.startswith("_") and not hasattr(cls, name):
                setattr(cls, name, _forward(name))
