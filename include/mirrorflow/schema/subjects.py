"""Subject names, as Confluent's serializers choose them (``io.confluent.kafka.serializers.
subject``): ``TopicNameStrategy`` (``<topic>-key``/``<topic>-value``), ``RecordNameStrategy``
(the record's full name) and ``TopicRecordNameStrategy`` (``<topic>-<full name>``). The
full name is what Confluent's schema classes call ``name()``: an Avro named type's
``namespace.name``, a Protobuf schema's first message (``package.Message``), a JSON
Schema's ``title``."""

from __future__ import annotations

import json
import re

from mirrorflow.errors import MirrorflowError


class SubjectError(MirrorflowError):
    """A record-name strategy met a schema without a name."""


_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.MULTILINE)
_MESSAGE = re.compile(r"^\s*message\s+(\w+)\s*\{", re.MULTILINE)


def record_name(schema_type: str, text: str) -> str:
    """The schema's full name (see the module's note)."""
    if schema_type == "PROTOBUF":
        found = _MESSAGE.search(text)
        if found is None:
            raise SubjectError("the Protobuf schema declares no message")
        package = _PACKAGE.search(text)
        return f"{package.group(1)}.{found.group(1)}" if package else found.group(1)
    parsed = json.loads(text)
    if schema_type == "JSON":
        title = parsed.get("title") if isinstance(parsed, dict) else None
        if not isinstance(title, str) or not title:
            raise SubjectError("the JSON schema has no 'title'")
        return title
    if not isinstance(parsed, dict) or parsed.get("type") not in ("record", "enum", "fixed"):
        raise SubjectError("the Avro schema is not a named type (record, enum or fixed)")
    name, namespace = parsed["name"], parsed.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def subject(strategy: str, topic: str, is_key: bool, schema_type: str, text: str) -> str:
    """The subject ``strategy`` gives a schema of ``topic``'s keys or values."""
    if strategy == "TopicNameStrategy":
        return f"{topic}-{'key' if is_key else 'value'}"
    name = record_name(schema_type, text)
    return name if strategy == "RecordNameStrategy" else f"{topic}-{name}"
