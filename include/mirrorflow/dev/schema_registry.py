"""A small schema registry for tests and local runs: Confluent Schema Registry's REST API,
the part that confluent-kafka's ``SchemaRegistryClient`` and serializers use.

It stands in for a real registry because none installs from the package indexes these
machines reach (Confluent's server is not on Maven Central, Apicurio's artifacts there are
incomplete, PyPI has none). mirrorflow itself talks to registries only through
confluent-kafka's client, so a real Confluent or Apicurio registry works unchanged.

What it serves, as Confluent's API reference documents it: ``GET /schemas/ids/{id}``,
``GET /subjects``, ``POST /subjects/{s}/versions`` (register: the same schema under the
same subject keeps its id and version; ids are global, and the same schema under another
subject gets the same id), ``POST /subjects/{s}`` (lookup), ``GET /subjects/{s}/versions``
and ``/versions/{v}`` (``latest`` too), ``GET``/``PUT /config`` and ``/config/{s}``; errors
with Confluent's codes (40401 subject, 40402 version, 40403 schema not found, 409
incompatible, 42201 invalid schema, 42203 invalid compatibility level, 40101 a request
without the basic-auth ``user_info`` the registry was given). Ids start at ``first_id``,
so two registries in a test hand out different ids; ``requests`` lists what was asked.

Compatibility is checked for Avro records only, by field: a reader must find each of its
fields without a default among the writer's, with the same type (``BACKWARD``: the new
schema reads the latest; ``FORWARD`` the other way; ``FULL`` both; ``*_TRANSITIVE``
against every version; ``NONE`` nothing). Other schema types are taken as compatible.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mirrorflow.errors import MirrorflowError

LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(MirrorflowError):
    """An answer other than 200: its HTTP status, Confluent error code and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class StoredSchema:
    id: int
    schema_type: str
    schema: str
    references: list[dict]

    def to_dict(self) -> dict:
        body: dict = {"id": self.id, "schema": self.schema}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references
        return body


def _key(schema_type: str, text: str, references: list[dict]) -> tuple:
    try:
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        canonical = text  # Protobuf
    refs = tuple((r["name"], r["subject"], r["version"]) for r in references)
    return schema_type, canonical, refs


def _fields(text: str) -> dict[str, dict] | None:
    parsed = json.loads(text)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    return {f["name"]: f for f in parsed.get("fields", [])}


def _reads(reader: str, writer: str) -> bool:
    """Whether Avro ``reader`` reads what ``writer`` wrote, by field (see the module)."""
    mine, theirs = _fields(reader), _fields(writer)
    if mine is None or theirs is None:
        return True
    return all((name in theirs and json.dumps(theirs[name]["type"], sort_keys=True) ==
               json.dumps(f["type"], sort_keys=True)) or "default" in f
               for name, f in mine.items())


@dataclass
class Registry:
    """The registry's state and its rules, apart from HTTP."""

    first_id: int = 1
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    ids: dict[tuple, int] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)
    level: str = "BACKWARD"
    lock: threading.Lock = field(default_factory=threading.Lock)
    user_info: str = ""  # when set, every request needs it as HTTP basic auth (401 else)
    requests: list[str] = field(default_factory=list)  # "METHOD /path", in order

    def schema(self, schema_id: int) -> dict:
        if schema_id not in self.schemas:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        return self.schemas[schema_id].to_dict()

    def versions(self, subject: str) -> list[int]:
        if subject not in self.subjects:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        return list(range(1, len(self.subjects[subject]) + 1))

    def version(self, subject: str, version: str) -> dict:
        versions = self.versions(subject)
        if version != "latest" and not version.isdigit():
            raise RegistryError(422, 42202, f"The specified version '{version}' is not a "
                                            "valid version id.")
        number = versions[-1] if version == "latest" else int(version)
        if number not in versions:
            raise RegistryError(404, 40402, f"Version {version} not found.")
        stored = self.schemas[self.subjects[subject][number - 1]]
        return {"subject": subject, "version": number, **stored.to_dict()}

    def lookup(self, subject: str, body: dict) -> dict:
        self.versions(subject)
        found = self.ids.get(_key(*_parts(body)))
        if found is None or found not in self.subjects[subject]:
            raise RegistryError(404, 40403, "Schema not found")
        return self.version(subject, str(self.subjects[subject].index(found) + 1))

    def register(self, subject: str, body: dict) -> dict:
        schema_type, text, references = _parts(body)
        key = _key(schema_type, text, references)
        existing = self.subjects.get(subject, [])
        if self.ids.get(key) in existing:
            return self.version(subject, str(existing.index(self.ids[key]) + 1))
        if schema_type == "AVRO":
            _check_avro(text, bool(references))
        level = self.levels.get(subject, self.level)
        against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
        for old in (self.schemas[i].schema for i in against):
            backward, forward = _reads(text, old), _reads(old, text)
            if (level.startswith(("BACKWARD", "FULL")) and not backward) or \
                    (level.startswith(("FORWARD", "FULL")) and not forward):
                raise RegistryError(409, 409, f"Schema being registered is incompatible with "
                                              f"an earlier schema for subject \"{subject}\"")
        schema_id = self.ids.setdefault(key, self.first_id + len(self.ids))
        self.schemas.setdefault(schema_id, StoredSchema(schema_id, schema_type, text, references))
        self.subjects.setdefault(subject, []).append(schema_id)
        return self.version(subject, str(len(self.subjects[subject])))

    def compatibility(self, subject: str | None) -> dict:
        if subject is not None and subject not in self.levels:
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have "
                                            "subject-level compatibility configured")
        return {"compatibilityLevel": self.levels[subject] if subject else self.level}

    def set_compatibility(self, subject: str | None, body: dict) -> dict:
        level = str(body.get("compatibility", "")).upper()
        if level not in LEVELS:
            raise RegistryError(422, 42203, f"Invalid compatibility level {level!r}")
        if subject is None:
            self.level = level
        else:
            self.levels[subject] = level
        return {"compatibility": level}


def _parts(body: dict) -> tuple[str, str, list[dict]]:
    if not isinstance(body.get("schema"), str):
        raise RegistryError(422, 42201, "Invalid schema: no schema given")
    return body.get("schemaType") or "AVRO", body["schema"], body.get("references") or []


def _check_avro(text: str, has_references: bool) -> None:
    """An Avro schema that does not parse is refused (422), unless it names types its
    references define (those are not resolved here)."""
    import fastavro

    try:
        fastavro.parse_schema(json.loads(text))
    except Exception as exc:
        if not has_references:
            raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None


ROUTES = (
    ("GET", r"/schemas/ids/(\d+)", lambda r, m, b: r.schema(int(m[1]))),
    ("GET", r"/subjects", lambda r, m, b: sorted(r.subjects)),
    ("GET", r"/subjects/([^/]+)/versions", lambda r, m, b: r.versions(m[1])),
    ("GET", r"/subjects/([^/]+)/versions/([^/]+)", lambda r, m, b: r.version(m[1], m[2])),
    ("POST", r"/subjects/([^/]+)/versions", lambda r, m, b: r.register(m[1], b)),
    ("POST", r"/subjects/([^/]+)", lambda r, m, b: r.lookup(m[1], b)),
    ("GET", r"/config", lambda r, m, b: r.compatibility(None)),
    ("GET", r"/config/([^/]+)", lambda r, m, b: r.compatibility(m[1])),
    ("PUT", r"/config", lambda r, m, b: r.set_compatibility(None, b)),
    ("PUT", r"/config/([^/]+)", lambda r, m, b: r.set_compatibility(m[1], b)),
)


def serve(registry: Registry, method: str, path: str, body: dict, store: Path | None = None):
    """The answer to one request; a change (POST register, PUT config) that succeeds is
    appended to ``store``, which :meth:`LocalRegistry.start` replays."""
    from urllib.parse import unquote

    for verb, pattern, action in ROUTES:
        match = re.fullmatch(pattern, path)
        if verb == method and match:
            groups = [match[0], *(unquote(g) for g in match.groups())]
            with registry.lock:
                answer = action(registry, groups, body)
                changed = method == "PUT" or (method == "POST" and path.endswith("/versions"))
                if store is not None and changed:
                    with store.open("a") as out:
                        out.write(json.dumps([method, path, body]) + "\n")
            return answer
    raise RegistryError(404, 404, f"HTTP 404 Not Found: {method} {path}")


class _Handler(BaseHTTPRequestHandler):
    registry: Registry
    store: Path | None = None

    def _answer(self, method: str) -> None:
        from urllib.parse import urlsplit

        path = urlsplit(self.path).path.rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        self.registry.requests.append(f"{method} {path}")
        try:
            body = json.loads(self.rfile.read(length)) if length else {}
            if self.registry.user_info and self.headers.get("Authorization") != (
                    "Basic " + base64.b64encode(self.registry.user_info.encode()).decode()):
                raise RegistryError(401, 40101, "Unauthorized")
            status, answer = 200, serve(self.registry, method, path, body, self.store)
        except RegistryError as exc:
            status, answer = exc.status, {"error_code": exc.code, "message": exc.message}
        except ValueError as exc:
            status, answer = 422, {"error_code": 422, "message": f"Unrecognized body: {exc}"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def log_message(self, *args) -> None:  # quiet: a test's output stays readable
        pass


@dataclass
class LocalRegistry:
    """A :class:`Registry` served on ``host``:``port`` (0: any free port) from a thread;
    a context manager."""

    first_id: int = 1
    host: str = "127.0.0.1"
    port: int = 0
    user_info: str = ""  # "user:password" every request must carry (basic auth)
    store: Path | None = None  # where its changes are kept across restarts
    registry: Registry = field(init=False)
    server: ThreadingHTTPServer | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.registry = Registry(self.first_id, user_info=self.user_info)

    @property
    def url(self) -> str:
        assert self.port, "the registry was never started"
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalRegistry:
        """Serve (again, after :meth:`stop`, on the same port and with the same
        schemas)."""
        if self.store is not None and self.store.exists() and not self.registry.schemas:
            for method, path, body in map(json.loads, self.store.read_text().splitlines()):
                serve(self.registry, method, path, body)
        handler = type("Handler", (_Handler,), {"registry": self.registry,
                                                "store": self.store})
        self.server = ThreadingHTTPServer((self.host, self.port), handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True,
                         name=f"schema registry :{self.server.server_address[1]}").start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m mirrorflow.dev.schema_registry --port P --first-id N [--store FILE]``:
    serve until killed (``mirrorflow local up`` starts it so)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-id", type=int, default=1)
    parser.add_argument("--store", type=Path)
    args = parser.parse_args(argv)
    registry = LocalRegistry(args.first_id, args.host, args.port, store=args.store).start()
    print(f"schema registry on {registry.url}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    registry.stop()


if __name__ == "__main__":
    main()
