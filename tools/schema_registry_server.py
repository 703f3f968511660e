"""A small Schema Registry speaking Confluent's REST API, in memory, for the tests and the demo.

Why our own: no Confluent-API-compatible registry server could be built here from published
artifacts alone (see docs/formats.md, "The registry in the tests"). This one implements what
confluent-kafka's ``SchemaRegistryClient`` and its serializers use, with Confluent's status
and error codes:

* ``POST /subjects/{s}/versions`` (register; an identical schema keeps its id and version),
  ``POST /subjects/{s}`` (look up), ``GET /subjects``, ``GET /subjects/{s}/versions``,
  ``GET /subjects/{s}/versions/{n|latest}``, ``DELETE /subjects/{s}``;
* ``GET /schemas/ids/{id}``, ``GET /schemas/guids/{guid}`` (each schema has an id and a GUID,
  for ids in record headers), ``GET /schemas/types``;
* ``GET|PUT /config`` and ``/config/{s}``, ``POST /compatibility/subjects/{s}/versions/{n}``.

Schemas are stored as registered (Protobuf as the base64 ``FileDescriptorProto`` confluent-kafka
registers, and answered the same for ``format=serialized``). Compatibility: ``NONE``, and
``BACKWARD``/``BACKWARD_TRANSITIVE`` (the default, as Confluent's) checked for Avro records (a
new field needs a default; a kept field keeps its type or a promotion of it); JSON Schema and
Protobuf registrations are not checked. Basic auth (``--user name:password``) when given.

Standard library only: ``python3 tools/schema_registry_server.py --port N [--user u:p]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

TYPES = ("AVRO", "PROTOBUF", "JSON")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Registry:
    """The state: schemas by id, subjects' versions, compatibility levels."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, dict[str, Any]] = {}   # id -> {schema, schemaType, references, guid}
        self.subjects: dict[str, list[int]] = {}        # subject -> schema id of each version
        self.levels: dict[str, str] = {}
        self.level = "BACKWARD"

    def _key(self, body: dict[str, Any]) -> tuple[str, str, str]:
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in TYPES:
            raise RegistryError(422, 42201, f"Unknown schema type {schema_type}")
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise RegistryError(422, 42201, "Empty schema")
        if schema_type != "PROTOBUF":
            try:
                text = json.dumps(json.loads(text), separators=(",", ":"))
            except ValueError as exc:
                raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None
        refs = json.dumps(body.get("references") or [], sort_keys=True)
        return schema_type, text, refs

    def _id_of(self, key: tuple[str, str, str]) -> int | None:
        for schema_id, found in self.schemas.items():
            if (found["schemaType"], found["schema"], found["refs"]) == key:
                return schema_id
        return None

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            key = self._key(body)
            versions = self.subjects.setdefault(subject, [])
            schema_id = self._id_of(key)
            if schema_id is not None and schema_id in versions:
                return {"id": schema_id, "guid": self.schemas[schema_id]["guid"],
                        "version": versions.index(schema_id) + 1}
            level = self.levels.get(subject, self.level)
            problems = self._incompatible(key, versions, level)
            if problems:
                if not versions:
                    del self.subjects[subject]
                raise RegistryError(409, 409, f"Schema being registered is incompatible with "
                                              f"an earlier schema for subject \"{subject}\": "
                                              f"{'; '.join(problems)}")
            if schema_id is None:
                schema_id = max(self.schemas, default=0) + 1
                self.schemas[schema_id] = {"schemaType": key[0], "schema": key[1],
                                           "refs": key[2], "guid": str(uuid.uuid4()),
                                           "references": body.get("references") or []}
            versions.append(schema_id)
            return {"id": schema_id, "guid": self.schemas[schema_id]["guid"],
                    "version": len(versions)}

    def _incompatible(self, key: tuple[str, str, str], versions: list[int],
                      level: str) -> list[str]:
        if level == "NONE" or not versions or key[0] != "AVRO":
            return []
        against = versions if level.endswith("TRANSITIVE") else versions[-1:]
        new = json.loads(key[1])
        problems: list[str] = []
        for schema_id in against:
            old = json.loads(self.schemas[schema_id]["schema"])
            if level.startswith(("BACKWARD", "FULL")):
                problems += _avro_reads(new, old, "")
            if level.startswith(("FORWARD", "FULL")):
                problems += _avro_reads(old, new, "")
        return problems

    def entry(self, schema_id: int, subject: str | None = None) -> dict[str, Any]:
        found = self.schemas.get(schema_id)
        if found is None:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        out = {"id": schema_id, "guid": found["guid"], "schema": found["schema"],
               "schemaType": found["schemaType"], "references": found["references"]}
        if subject is not None:
            out["subject"] = subject
        return out

    def version(self, subject: str, version: str) -> dict[str, Any]:
        versions = self.subjects.get(subject)
        if not versions:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        number = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= number <= len(versions):
            raise RegistryError(404, 40402, f"Version {version} not found.")
        return {**self.entry(versions[number - 1], subject), "version": number}

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        versions = self.subjects.get(subject)
        if not versions:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        schema_id = self._id_of(self._key(body))
        if schema_id is None or schema_id not in versions:
            raise RegistryError(404, 40403, "Schema not found")
        return {**self.entry(schema_id, subject), "version": versions.index(schema_id) + 1}

    def by_guid(self, guid: str) -> dict[str, Any]:
        for schema_id, found in self.schemas.items():
            if found["guid"] == guid:
                return self.entry(schema_id)
        raise RegistryError(404, 40403, f"Schema {guid} not found")


_PROMOTIONS = {"int": {"int", "long", "float", "double"}, "long": {"long", "float", "double"},
               "float": {"float", "double"}, "string": {"string", "bytes"},
               "bytes": {"bytes", "string"}}


def _avro_reads(reader: Any, writer: Any, path: str) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (Avro schema resolution); [] if it can."""
    where = path or "the top"
    if isinstance(writer, list):
        return [p for branch in writer for p in _avro_reads(reader, branch, path)]
    if isinstance(reader, list):
        if any(not _avro_reads(branch, writer, path) for branch in reader):
            return []
        return [f"{where}: no branch of the reader's union reads {_name(writer)}"]
    r, w = _name(reader), _name(writer)
    if r == "record" and w == "record":
        written = {f["name"]: f for f in writer["fields"]}
        problems = []
        for field in reader["fields"]:
            sub = f"{path}.{field['name']}".lstrip(".")
            if field["name"] in written:
                problems += _avro_reads(field["type"], written[field["name"]]["type"], sub)
            elif "default" not in field:
                problems.append(f"{sub}: a new field without a default")
        return problems
    if r in ("array", "map") and r == w:
        part = "items" if r == "array" else "values"
        return _avro_reads(reader[part], writer[part], f"{path}[]")
    if r == w or r in _PROMOTIONS.get(w, ()):
        return []
    return [f"{where}: {w} cannot be read as {r}"]


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return "union" if isinstance(schema, list) else str(schema)


class Handler(BaseHTTPRequestHandler):
    registry: Registry
    user: str | None = None
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            parsed = json.loads(self.rfile.read(length))
        except ValueError:
            raise RegistryError(400, 400, "Unrecognized JSON body") from None
        return parsed if isinstance(parsed, dict) else {}

    def _authorized(self) -> bool:
        if self.user is None:
            return True
        expected = "Basic " + base64.b64encode(self.user.encode()).decode()
        return self.headers.get("Authorization") == expected

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if not self._authorized():
                raise RegistryError(401, 401, "Unauthorized")
            self._send(200, self._answer(method, parts, query))
        except RegistryError as exc:
            self._send(exc.status, {"error_code": exc.code, "message": exc.message})

    def _answer(self, method: str, parts: list[str], query: dict[str, str]) -> Any:
        reg = self.registry
        match (method, parts):
            case ("GET", []):
                return {}
            case ("GET", ["schemas", "types"]):
                return list(TYPES)
            case ("GET", ["schemas", "ids", schema_id]):
                return reg.entry(_int(schema_id), query.get("subject"))
            case ("GET", ["schemas", "guids", guid]):
                return reg.by_guid(guid)
            case ("GET", ["subjects"]):
                return sorted(reg.subjects)
            case ("POST", ["subjects", subject, "versions"]):
                return reg.register(subject, self._body())
            case ("POST", ["subjects", subject]):
                return reg.lookup(subject, self._body())
            case ("GET", ["subjects", subject, "versions"]):
                versions = reg.subjects.get(subject)
                if not versions:
                    raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
                return list(range(1, len(versions) + 1))
            case ("GET", ["subjects", subject, "versions", version]):
                return reg.version(subject, version)
            case ("DELETE", ["subjects", subject]):
                with reg.lock:
                    versions = reg.subjects.pop(subject, None)
                if versions is None:
                    raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
                return list(range(1, len(versions) + 1))
            case ("GET", ["config"]):
                return {"compatibilityLevel": reg.level}
            case ("GET", ["config", subject]):
                if subject not in reg.levels:
                    raise RegistryError(404, 40408, f"Subject '{subject}' has no config")
                return {"compatibilityLevel": reg.levels[subject]}
            case ("PUT", ["config", *rest]):
                level = self._body().get("compatibility") or ""
                if level not in LEVELS:
                    raise RegistryError(422, 42203, f"Invalid compatibility level {level}")
                if rest:
                    reg.levels[rest[0]] = level
                else:
                    reg.level = level
                return {"compatibility": level}
            case ("POST", ["compatibility", "subjects", subject, "versions", version]):
                body = self._body()
                old = reg.version(subject, version)
                key = reg._key(body)
                if key[0] != "AVRO":
                    return {"is_compatible": True}
                problems = _avro_reads(json.loads(key[1]), json.loads(old["schema"]), "")
                return {"is_compatible": not problems, "messages": problems}
        raise RegistryError(404, 404, f"HTTP 404 Not Found: {method} /{'/'.join(parts)}")

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")


def _int(text: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise RegistryError(404, 40403, f"Schema {text} not found")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--user", help="name:password for basic auth (none when omitted)")
    args = parser.parse_args()
    Handler.registry = Registry()
    Handler.user = args.user
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
