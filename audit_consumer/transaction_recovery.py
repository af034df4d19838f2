"""How the audit consumer starts over from its committed state after a failure, keeping counts exact.

Every failure ends the same way: what the open transaction held is aborted (never visible to
``read_committed`` readers), and the instance rewinds: it reloads the state of its assigned partitions
and seeks to their committed offsets, so it counts those messages again (docs/DESIGN.md, invariant 4).
What differs is how the clients get back into shape:

* a transaction that failed (retriable or not fatal): abort, rewind;
* a producer stuck in librdkafka (:class:`~audit_consumer.watchdog.TransactionHungError`): abandon it,
  start a new one with the same ``transactional.id`` (which fences the stuck one), rewind;
* a fenced producer: a new producer takes the ``transactional.id`` back, then rewind; at most
  :data:`FENCED_RECOVERIES` times in :data:`FENCED_RECOVERY_WINDOW_S`;
* a failed input consumer: abort, a new consumer takes the old member's place, and its assignment loads
  the committed state; within the same kind of budget. A rewind whose committed offsets cannot be read
  through the input consumer ends the same way.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from audit_consumer.counts import PartitionCounts
from audit_consumer.recovery_budget import RecoveryBudget
from audit_consumer.watchdog import TransactionHungError, call_with_deadline
from kafka_plumbing.errors import KafkaAuditError

if TYPE_CHECKING:
    from audit_consumer.consumer import ConsumerStats
    from audit_consumer.settings import AuditConsumerSettings

log = logging.getLogger(__name__)

REWIND_TIMEOUT_S = 120
"""How long a rewind waits for the group's committed offsets (see :func:`committed_offsets`), s."""

FENCED_RECOVERIES = 3
"""How many times within :data:`FENCED_RECOVERY_WINDOW_S` an instance whose producer was fenced takes its
``transactional.id`` back (a new producer, ``init_transactions``, a rewind) before it gives up. A
transaction coordinator that aborts a transaction it timed out (``transaction.timeout.ms``, e.g. while
brokers restart one after the other) bumps the producer epoch, and librdkafka reports the next call as
fatal ``_FENCED`` although no other instance exists; a real second instance with the same id fences this
one again and again, so the budget runs out and it stops (found by the soak, issue 18). The same budget
bounds the replacements of a failed input consumer."""

FENCED_RECOVERY_WINDOW_S = 600.0
"""The period of :data:`FENCED_RECOVERIES`, s."""


class AuditConsumerError(KafkaAuditError):
    """The audit consumer cannot go on (fenced by a newer instance, or a fatal Kafka error)."""


def committed_offsets(
    consumer: Consumer, partitions: list[TopicPartition], timeout_s: float = REWIND_TIMEOUT_S
) -> list[TopicPartition]:
    """Return the group's committed offsets of ``partitions``, retrying timeouts for up to ``timeout_s``.

    Right after a hung transaction the group coordinator can answer late (seen once in CI: a 30 s
    OffsetFetch timeout right after the transactional producer was replaced). One cause is KIP-447:
    offsets of the abandoned transaction stay pending ("unstable") until the coordinator aborts it.

    Args:
        consumer: The group's consumer.
        partitions: Partitions to look up.
        timeout_s: Overall deadline, s; each attempt waits up to 30 s.

    Raises:
        AuditConsumerError: any other error, or no answer by the deadline (the caller then changes
            nothing: a restarted instance resumes from the committed state).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return list(consumer.committed(partitions, min(30.0, max(1.0, timeout_s))))
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() != KafkaError._TIMED_OUT or time.monotonic() >= deadline:
                raise AuditConsumerError(f"cannot read the committed offsets: {err.str()}") from exc
            log.warning("committed offsets not read yet (%s); retrying", err.str())


class TransactionRecovery:
    """The audit consumer's recoveries (see the module docstring), mixed into its class.

    The class using it owns the clients and the counts; it sets the attributes annotated below and
    implements :meth:`_load_states` and :meth:`_discover`. Its own ``__init__`` calls this one.
    """

    s: AuditConsumerSettings
    stats: ConsumerStats
    topics: list[str]
    _consumer: Consumer
    _consumer_config: dict[str, Any]
    _producer: Producer
    _producer_config: dict[str, Any]
    _in_txn: bool
    _txn_timeout_s: float  # the transactional calls' timeout, s
    _parts: dict[tuple[str, int], PartitionCounts]
    _at_end: dict[tuple[str, int], int]  # partition -> the end offset of its last PARTITION_EOF

    def __init__(self) -> None:
        self._abandoned: list[Producer] = []  # stuck in a hung librdkafka call; never destroyed under it
        self._consumer_failed: KafkaError | None = None  # a fatal error of the input consumer, to recover
        self._fencing_budget = RecoveryBudget(FENCED_RECOVERIES, FENCED_RECOVERY_WINDOW_S)
        self._consumer_budget = RecoveryBudget(FENCED_RECOVERIES, FENCED_RECOVERY_WINDOW_S)

    # ------------------------------------------------------------------ implemented by the consumer
    def _load_states(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionCounts]:
        """Return the committed state of each partition in ``keys`` that has one."""
        raise NotImplementedError

    def _discover(self) -> None:
        """Subscribe the input consumer to the topics to audit (its assignment loads their state)."""
        raise NotImplementedError

    def _state_position(self, key: tuple[str, int], committed: int) -> TopicPartition:
        """Where to read partition ``key`` from: its state's end, else ``committed``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ recoveries
    def _transaction_failed(self, exc: KafkaException) -> None:
        """Abort the failed transaction and rewind; a fenced producer takes its id back first.

        Raises:
            AuditConsumerError: fenced too often (see :meth:`_recover_from_fencing`), or a replacement
                producer cannot be initialised.
        """
        err: KafkaError = exc.args[0]
        if err.fatal() or err.code() == KafkaError._FENCED:
            self._recover_from_fencing(exc)
            return
        log.warning("transaction failed (%s); aborting and rewinding to the last committed state", err.str())
        # Abort on every non-fatal error: retriable ones (broker transport failure) leave the transaction
        # open too, and re-sending this transaction's records after a rewind is what keeps counts exact.
        try:
            call_with_deadline(
                self._producer.abort_transaction,
                self._txn_timeout_s,
                deadline_s=self._txn_timeout_s * 1.5 + 5,
            )
        except (KafkaException, TransactionHungError) as abort_failed:
            self._replace_producer(TransactionHungError(f"abort failed: {abort_failed}"))
            return
        self.stats.aborted += 1
        self._rewind()

    def _replace_producer(self, exc: TransactionHungError) -> None:
        """Abandon a producer stuck in librdkafka, fence it with a new one, rewind to the committed state.

        Raises:
            AuditConsumerError: the new producer cannot be initialised.
        """
        log.warning("%s (librdkafka #5456/#5511); replacing the transactional producer and rewinding", exc)
        self._abandoned.append(self._producer)
        self._new_producer()
        self.stats.aborted += 1
        self._rewind()

    def _new_producer(self, attempts: int = 3) -> None:
        """Create the transactional producer again and initialise it (fencing the old one's epoch).

        Args:
            attempts: How often ``init_transactions`` is tried; retriable errors (a coordinator still
                moving) are retried, each attempt waits up to 60 s.

        Raises:
            AuditConsumerError: a non-retriable error, or the last attempt failed.
            TransactionHungError: ``init_transactions`` hung for 95 s.
        """
        self._producer = Producer(self._producer_config)
        for attempt in range(1, attempts + 1):
            try:
                call_with_deadline(self._producer.init_transactions, 60, deadline_s=95)
                return
            except KafkaException as exc:
                if attempt == attempts or not exc.args[0].retriable():
                    raise AuditConsumerError(f"cannot initialise transactions: {exc.args[0].str()}") from exc
                log.warning("init_transactions failed (%s); retrying", exc.args[0].str())

    def _recover_from_fencing(self, exc: KafkaException) -> None:
        """Take the ``transactional.id`` back after a fencing, within :data:`FENCED_RECOVERIES`.

        The fenced producer is purged and closed (bounded; one that hangs is abandoned), a new one is
        initialised and the instance rewinds to the last committed state, as after an abort: what the
        fenced transaction held was never visible (read_committed), so counts stay exact (invariant 4).

        Args:
            exc: The fatal error the transaction failed with.

        Raises:
            AuditConsumerError: the budget is spent (another instance with this id runs), or the new
                producer cannot be initialised.
        """
        err: KafkaError = exc.args[0]
        budget = self._fencing_budget
        if not budget.spend():
            raise AuditConsumerError(
                f"transaction failed fatally ({err.str()}), {budget.spent + 1} times in "
                f"{budget.window_s:.0f} s: another instance with transactional.id "
                f"{self.s.transactional_id!r} took over, or the broker fenced us; restart this instance"
            ) from exc
        log.warning(
            "transaction failed fatally (%s): the coordinator fenced this producer (no other instance "
            "needed: a transaction it timed out or aborted while brokers restarted bumps the epoch); "
            "taking transactional.id %r back with a new producer and rewinding (%d of %d in %.0f s)",
            err.str(),
            self.s.transactional_id,
            budget.spent,
            budget.times,
            budget.window_s,
        )
        old = self._producer
        try:
            old.purge()
            call_with_deadline(old.close, deadline_s=20)
        except (KeyboardInterrupt, SystemExit):
            raise
        except:  # noqa: E722 - a fatal producer raises KafkaError itself; a hung close is abandoned
            self._abandoned.append(old)
        self._new_producer()
        self.stats.aborted += 1
        self._rewind()

    def _replace_consumer_instead(self, exc: AuditConsumerError) -> None:
        """Rewind by replacing the input consumer, whose committed offsets could not be read.

        Seen in the 5-minute soak: the group coordinator's broker was killed while a transaction hung,
        the input consumer was fenced as a static member meanwhile, and the rewind's OffsetFetch through
        it failed with NOT_COORDINATOR; the instance exited. Now the counts are dropped and the input
        consumer counts as failed, so the poll loop's next turn runs :meth:`_recover_consumer` (abort what
        is open, a new consumer, whose assignment loads the committed state and offsets), within its budget.
        """
        cause = exc.__cause__
        err = cause.args[0] if isinstance(cause, KafkaException) else KafkaError(KafkaError._FAIL, str(exc))
        log.warning("%s; replacing the input consumer (its assignment loads the committed state)", exc)
        # Dropped now, not at the replacement: a stop before the loop's next turn ends in a last commit.
        self._parts.clear()
        self._at_end.clear()
        self._consumer_failed = err

    def _recover_consumer(self) -> None:
        """Replace an input consumer that failed fatally: abort, a new consumer, its assignment rewinds.

        What the open transaction holds is aborted (never visible), the counts of the assigned
        partitions are dropped, and the new consumer (same ``group.id`` and ``group.instance.id``, so it
        takes the old member's place) is assigned its partitions again: the assignment loads their
        committed state and reading resumes at the committed offsets. Counts stay exact (invariant 4).
        At most :data:`FENCED_RECOVERIES` times in :data:`FENCED_RECOVERY_WINDOW_S`.

        Raises:
            AuditConsumerError: the budget is spent.
        """
        err = self._consumer_failed
        assert err is not None
        self._consumer_failed = None
        budget = self._consumer_budget
        if not budget.spend():
            raise AuditConsumerError(
                f"fatal consumer error ({err.str()}), {budget.spent + 1} times in "
                f"{budget.window_s:.0f} s; restart this instance"
            )
        log.warning(
            "fatal consumer error (%s); aborting, replacing the consumer and rewinding (%d of %d in %.0f s)",
            err.str(),
            budget.spent,
            budget.times,
            budget.window_s,
        )
        if self._in_txn:
            try:
                call_with_deadline(
                    self._producer.abort_transaction,
                    self._txn_timeout_s,
                    deadline_s=self._txn_timeout_s * 1.5 + 5,
                )
            except (KeyboardInterrupt, SystemExit):
                raise
            except:  # noqa: E722 - a fatal producer raises KafkaError itself; start over with a new one
                self._abandoned.append(self._producer)
                self._new_producer()
            self._in_txn = False
        self._parts.clear()  # first: a revoke while the old consumer closes must commit nothing
        self._at_end.clear()
        old = self._consumer
        try:
            call_with_deadline(old.close, deadline_s=30)
        except (KeyboardInterrupt, SystemExit):
            raise
        except:  # noqa: E722 - a dead consumer may fail to close; it is dropped all the same
            log.warning("closing the failed consumer: %s", sys.exc_info()[1])
        self.stats.aborted += 1
        self._consumer = Consumer(self._consumer_config)
        self.topics = []
        self._discover()  # subscribes again; the assignment callback loads the committed state

    def _rewind(self) -> None:
        """Reload state and seek to the committed offsets of every assigned partition.

        Where the input consumer cannot read the committed offsets, it is replaced instead
        (:meth:`_replace_consumer_instead`): the new consumer's assignment loads the same state.

        Raises:
            AuditConsumerError: the state topic cannot be read.
        """
        assigned = self._consumer.assignment()
        keys = [(p.topic, p.partition) for p in assigned]
        loaded = self._load_states(keys)
        committed: dict[tuple[str, int], int] = {}
        if not self.s.external_offsets:  # else the states are the only positions (_state_position)
            try:
                offsets = committed_offsets(self._consumer, assigned)
            except AuditConsumerError as exc:
                self._replace_consumer_instead(exc)
                return
            committed = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        for key in keys:
            self._parts[key] = loaded.get(key) or PartitionCounts(
                key[0], key[1], self.s.window_ms, self.s.grace_ms
            )
            # Its EOF was of the position given up: at its end again at the next EOF (librdkafka reports
            # one after a seek, however far back); until then the wall clock closes none of its windows.
            self._at_end.pop(key, None)
            # From where its state ends (an open transaction can hide a newer state than the committed
            # offsets': AuditConsumer._on_assign), else from the committed offset.
            self._consumer.seek(self._state_position(key, committed.get(key, OFFSET_BEGINNING)))
