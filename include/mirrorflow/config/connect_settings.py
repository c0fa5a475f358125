"""Kafka Connect settings an MM2 file may carry, judged by one question: would MM2 copy
different records or bytes because of the setting?

MM2 runs its connectors inside a Kafka Connect worker, so an MM2 file also holds worker
settings (internal topics, converters, REST) and connector settings (filters, transforms,
error tolerance). mirrorflow is not a Connect worker. A setting that cannot change what
reaches the target, or who sees it, is accepted and reported as ignored. A setting that
would change it is honoured (it is then a flow property) or refused here by name, with what
to do: never dropped with a warning, since a user whose own filter class kept personal data
out would otherwise get it mirrored.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.config.transforms import SMT_CLASS

_MIRROR = "org.apache.kafka.connect.mirror."
BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"


@dataclass(frozen=True)
class ConnectSetting:
    """One Connect setting (an exact key, or a prefix when it ends with '.').

    ``accepted`` lists the values mirrorflow matches (MM2's defaults); any other value is
    refused. ``refuse_any`` refuses every value. Otherwise the setting is ignored."""

    key: str
    why: str
    accepted: tuple[str, ...] = ()
    refuse_any: bool = False
    remedy: str = ""

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.key.endswith(".") else key == self.key

    @property
    def verdict(self) -> str:
        if self.refuse_any:
            return "refused"
        if self.accepted:
            return "only " + ", ".join(f"`{value.rsplit('.', 1)[-1]}`" for value in self.accepted)
        return "ignored"


def _only(key: str, value: str, why: str, remedy: str) -> ConnectSetting:
    return ConnectSetting(key, why, accepted=(value,), remedy=remedy)


SETTINGS: tuple[ConnectSetting, ...] = (
    _only("topic.filter.class", _MIRROR + "DefaultTopicFilter",
          "MM2 asks this class which topics to replicate.",
          "express the selection with 'topics' and 'topics.exclude' (names and regexes), "
          "or keep this flow on MM2"),
    _only("group.filter.class", _MIRROR + "DefaultGroupFilter",
          "MM2 asks this class which consumer groups to checkpoint and sync.",
          "express the selection with 'groups' and 'groups.exclude', or keep this flow on MM2"),
    _only("config.property.filter.class", _MIRROR + "DefaultConfigPropertyFilter",
          "MM2 asks this class which topic configs to copy to remote topics.",
          "express the selection with 'config.properties.exclude', or keep this flow on MM2"),
    ConnectSetting("transforms.", "MM2 runs these Single Message Transforms on every record "
                   "(renaming topics, dropping or rewriting records); mirrorflow runs the "
                   "schema registry transfer (docs/schemas.md) and refuses any other.",
                   accepted=(SMT_CLASS,)),
    ConnectSetting("predicates", "Conditions for the transform chain (see 'transforms').",
                   refuse_any=True, remedy="remove the predicates with the transform chain"),
    ConnectSetting("predicates.", "Configuration of a predicate (see 'transforms').",
                   refuse_any=True, remedy="remove the predicates with the transform chain"),
    _only("key.converter", BYTE_ARRAY_CONVERTER,
          "MM2 sets ByteArrayConverter (MirrorMakerConfig.workerConfig); another converter "
          "re-encodes every key.", "remove it: mirrorflow copies the bytes unchanged"),
    _only("value.converter", BYTE_ARRAY_CONVERTER,
          "MM2 sets ByteArrayConverter; another converter re-encodes every value.",
          "remove it: mirrorflow copies the bytes unchanged"),
    _only("header.converter", BYTE_ARRAY_CONVERTER,
          "MM2 sets ByteArrayConverter; another converter re-encodes every header.",
          "remove it: mirrorflow copies the bytes unchanged"),
    _only("errors.tolerance", "none",
          "With 'all', MM2 skips records it cannot convert, transform or (KIP-779) write.",
          "remove it: mirrorflow never skips a record; one it cannot write fails the run, "
          "naming it, and leaves the positions where they were"),
    ConnectSetting("key.converter.", "Options of the key converter: bytes are copied as they "
                   "are."),
    ConnectSetting("value.converter.", "Options of the value converter."),
    ConnectSetting("header.converter.", "Options of the header converter."),
    ConnectSetting("errors.", "Error logging and dead-letter settings (sink connectors): "
                   "nothing is skipped, so nothing is logged or diverted."),
    ConnectSetting("offset.storage.", "The Connect worker's own topics: mirrorflow keeps "
                   "positions in MM2's `mm2-offsets.<cluster>.internal` format regardless."),
    ConnectSetting("config.storage.", "The Connect worker's connector-config topic."),
    ConnectSetting("status.storage.", "The Connect worker's status topic."),
    ConnectSetting("worker.", "Connect worker identity and timing."),
    ConnectSetting("task.", "Connect task timing."),
    ConnectSetting("offset.flush.", "How often Connect flushes positions: mirrorflow commits "
                   "them with each run."),
    ConnectSetting("exactly.once.", "The worker switch for KIP-618 (exactly.once.source."
                   "support): mirrorflow writes transactionally as 'exactly.once.support' "
                   "says."),
    ConnectSetting("transaction.boundary", "When an exactly-once MM2 task commits its "
                   "transaction (KIP-618: a poll, or an interval): mirrorflow commits every "
                   "'mirrorflow.transaction.records' records and at the end of a run."),
    ConnectSetting("transaction.boundary.", "Options of 'transaction.boundary' (its "
                   "interval)."),
    ConnectSetting("dedicated.mode.", "MM2's dedicated-mode REST switches."),
    ConnectSetting("replication.policy.", "Options of a custom Java replication policy."),
    ConnectSetting("consumer.poll.timeout.ms", "How long MM2's task polls: a timing."),
)


def find(key: str) -> ConnectSetting | None:
    """The first setting that governs ``key`` (exact keys come before prefixes)."""
    return next((s for s in SETTINGS if s.matches(key)), None)


def refusal(key: str, value: str) -> str | None:
    """Why ``key = value`` cannot run here, or None when mirrorflow honours or ignores it."""
    setting = find(key)
    if setting is None:
        return None
    value = value.strip()
    short_names = {accepted.rsplit(".", 1)[-1] for accepted in setting.accepted}
    if setting.refuse_any or (setting.accepted and value not in setting.accepted
                              and value not in short_names):
        shown = f" = {value}" if value else ""
        return f"'{key}{shown}' would change what MM2 copies ({setting.why}) and mirrorflow " \
               f"does not run it: {setting.remedy}"
    return None


def reference_table() -> str:
    """The Markdown table of every Connect setting and what mirrorflow does with it."""
    lines = ["| Connect setting | mirrorflow | why |", "| --- | --- | --- |"]
    for setting in SETTINGS:
        shown = setting.key + ("*" if setting.key.endswith(".") else "")
        lines.append(f"| `{shown}` | {setting.verdict} | {setting.why} |")
    return "\n".join(lines)
