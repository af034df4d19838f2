"""The audit stamp packed in one C call, for the audited producer's produce() hot path.

:func:`stamp_packer` gives what :func:`audit_record.stamp.encode` computes (the producer id prefix, then
the sequence number in :data:`~audit_record.stamp.SEQUENCE_BYTES` big-endian bytes) as a bound
``struct.Struct.pack``: one C call per message instead of Python-level byte arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct

from audit_record.stamp import SEQUENCE_BYTEORDER, SEQUENCE_BYTES

if (SEQUENCE_BYTES, SEQUENCE_BYTEORDER) != (8, "big"):  # pragma: no cover - the stamp's definition
    raise ImportError("the stamp packing below assumes an 8-byte big-endian sequence number")
_SEQUENCE_FORMAT = "Q"  # struct: unsigned 8 bytes, big-endian with ">"


def stamp_packer(prefix: bytes) -> Callable[[bytes, int], bytes]:
    """Return ``pack(prefix, sequence)``: the stamp header's value, ``prefix`` + 8-byte big-endian sequence.

    Args:
        prefix: The producer id prefix (:func:`audit_record.stamp.encode_prefix`); ``pack`` must be given
            this same prefix (its length is part of the format).

    Returns:
        A bound ``struct.Struct.pack``; it raises ``struct.error`` for a sequence outside 0 to 2**64 - 1.
    """
    return Struct(f">{len(prefix)}s{_SEQUENCE_FORMAT}").pack
