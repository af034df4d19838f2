"""Topic names under MirrorMaker 2 replication: which source topic a replicated topic is a copy of.

MirrorMaker 2 (MM2) names the copy of topic ``T`` of the source cluster with alias ``A`` by its
*replication policy*:

* ``default`` (``org.apache.kafka.connect.mirror.DefaultReplicationPolicy``): ``A.T``, i.e. the source
  cluster alias, the separator (``replication.policy.separator``, default ``.``) and the name. A topic
  replicated twice (A -> B -> C) is ``B.A.T`` on C.
* ``identity`` (``IdentityReplicationPolicy``): ``T`` on both clusters.

The audit counts a replicated copy under its source topic, so every tier of one stream reconciles in
one (topic, window) (``docs/DESIGN.md``, "Tiers"). :class:`ReplicationNaming` maps both ways; only the
aliases it is given are stripped, so a topic whose name merely contains a dot (``audit.weblog``) is
never mistaken for a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kafka_plumbing.errors import ConfigError

ReplicationPolicy = Literal["default", "identity"]
"""MM2 replication policies kafka-audit understands (see the module docstring)."""

POLICY_CLASSES: dict[str, str] = {
    "default": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "identity": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
}
"""MM2 ``replication.policy.class`` of each policy."""


@dataclass(frozen=True)
class ReplicationNaming:
    """Maps replicated topic names back to their source topic (and source topics to their copies).

    Attributes:
        policy: ``default`` (copies are ``<alias><separator><topic>``) or ``identity`` (same name).
        source_aliases: MM2 cluster aliases of the source clusters whose copies are recognised (e.g.
            ``("A",)``); with ``default``, a name starting with ``<alias><separator>`` is a copy.
        separator: MM2 ``replication.policy.separator``.

    Raises:
        ConfigError: an alias is empty or contains the separator, or the separator is empty.
    """

    policy: ReplicationPolicy = "default"
    source_aliases: tuple[str, ...] = ()
    separator: str = "."

    def __post_init__(self) -> None:
        if self.policy not in POLICY_CLASSES:
            raise ConfigError(f"replication policy {self.policy!r}: allowed values are default, identity")
        if not self.separator:
            raise ConfigError("replication separator must not be empty")
        for alias in self.source_aliases:
            if not alias or self.separator in alias:
                raise ConfigError(
                    f"source cluster alias {alias!r} must be non-empty and not contain {self.separator!r}"
                )

    def source_topic(self, topic: str) -> str:
        """Return the source topic of ``topic``: itself unless it is a recognised copy.

        With the ``default`` policy every leading ``<alias><separator>`` of a known alias is removed
        (``B.A.orders`` -> ``orders`` when both ``A`` and ``B`` are known), as MM2's
        ``ReplicationPolicy.originalTopic`` does.
        """
        if self.policy == "identity" or not self.source_aliases:
            return topic
        name = topic
        while True:
            alias, sep, rest = name.partition(self.separator)
            if not sep or not rest or alias not in self.source_aliases:
                return name
            name = rest

    def source_alias(self, topic: str) -> str | None:
        """Return the alias of the cluster ``topic`` was replicated from (default policy), else None."""
        if self.policy == "identity":
            return None
        alias, sep, rest = topic.partition(self.separator)
        return alias if sep and rest and alias in self.source_aliases else None

    def replicated_topic(self, source_alias: str, topic: str) -> str:
        """Return the name MM2 gives the copy of ``topic`` from the cluster ``source_alias``."""
        if self.policy == "identity":
            return topic
        return f"{source_alias}{self.separator}{topic}"

    @property
    def policy_class(self) -> str:
        """MM2 ``replication.policy.class`` for this policy."""
        return POLICY_CLASSES[self.policy]


IDENTITY = ReplicationNaming("identity")
"""No renaming: every topic is its own source topic."""
