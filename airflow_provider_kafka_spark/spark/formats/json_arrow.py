"""JSON values decoded natively into Arrow (issue 53), with exactly the values and corrupt
records of Spark's path (``from_json(value, schema + _corrupt_record, PERMISSIVE)`` in
``spark/read/decode.py``; Spark 4 with Jackson, measured against it record by record in
``tests/formats/test_native_json.py``).

How a batch is decoded
    pyarrow's C++ JSON reader (rapidjson) reads the batch's values, with the schema given and
    unknown fields ignored. A range of values it refuses is split (at the row its error
    names, else in halves) until the values it refuses are alone; those, and the values it is
    never given, are decoded one by one: read by Python's json module (its C scanner) or, where
    it refuses them or they near Jackson's limits, by a small parser here that follows
    Jackson's grammar with Spark's options (both give the same tree where both read), then
    converted as Spark's ``JacksonParser`` converts (about 10 us a record). Each value given
    to the reader starts with ``{`` and ends with ``}`` (JSON whitespace around them aside).
    The reader reads them where they lie in the array when they lie side by side and none holds a
    ``}`` followed by ``{`` or ``n`` (a second object, or ``null``): a value that runs on into
    the next (ends inside a string) then gives fewer rows than values. Otherwise it reads them
    joined by newlines, which no string can hold, so no value runs on. Either way a successful
    read has a row per value exactly when it has as many rows as values. The column has the
    Arrow type of Spark's path: the schema with every field and element nullable
    (``from_json`` reads so).

Native: a top-level struct of ``string``, ``long``/``int``/``short``/``byte``, ``double``/
``float``, ``boolean``, nested ``struct`` and ``array`` of those, all with Spark's semantics:
    * a record is corrupt when it is not valid UTF-8, empty or blank, not a JSON object
      (``null``, an array, a scalar), not well-formed up to the end of its object (what
      follows the object is ignored, as Spark does), or has a value of another JSON type
      than its field; fields the schema lacks are skipped but must be well-formed; the
      last of duplicate keys wins, every one must convert; keys match exactly; a key
      ``_corrupt_record`` in the data is skipped like any other the schema lacks;
    * Jackson's options as Spark sets them: single-quoted names and strings (and ``\\'``
      in any string) are accepted; comments, unquoted names, leading zeros, ``+1``,
      ``.5``, ``1.``, trailing commas and raw control characters in strings are not;
      ``NaN``, ``Infinity``, ``-Infinity``, ``+Infinity``, ``+INF`` and ``-INF`` are numbers
      (rapidjson's ``Inf``, ``-Inf`` and ``-NaN`` are not); more than 1,000 digits in an
      integer, nesting deeper than 1,000 and keys longer than 50,000 UTF-16 units are
      corrupt (Jackson's limits as Spark's factory has them, measured at their edges);
    * integer fields take integer tokens in the type's range only (``1.0`` and ``1e2`` are
      corrupt); ``byte`` takes -128..255, 128..255 wrapping to negative (Jackson's
      ``getByteValue``); ``double``/``float`` take any number, correctly rounded (``-0``
      is 0.0, ``-0.0`` is -0.0, overflow is infinity), and the strings ``"NaN"``,
      ``"Infinity"``, ``"+Infinity"``, ``"-Infinity"``, ``"+INF"``, ``"-INF"``;
    * a ``string`` field keeps a string's text (an unpaired surrogate escape becomes ``?``),
      and the JSON text of any other value as Jackson writes it again: integers in
      canonical form, ``true``/``false``, ``NaN`` and infinities as the quoted strings
      ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, objects and arrays compact with Jackson's
      escapes (control characters, and surrogates as upper-case ``\\uXXXX``).

Records left to Spark's path (``Decoded.fallback``): a ``string`` field given a fraction or
exponent number (alone or inside an object or array), which Spark writes by the JVM's
``Double.toString`` (Java 17 prints some doubles with more digits than the shortest form,
Java 19+ does not: the text depends on the executors' JVM); numbers of 990 to 1,000
significant characters and strings longer than 20,000,000 characters (Jackson's limits,
not measured at their exact edges).

Not native (``native_json`` is None; Spark's ``from_json`` decodes the column):
``timestamp``, ``timestamp_ntz`` and ``date`` (Spark parses them with its own patterns in
the session time zone, and reads numbers as seconds), ``decimal`` (Spark rounds half up to
the scale, takes strings through Java's ``BigDecimal`` with commas removed, Unicode digits
included, and finds a value over the precision corrupt, where pyarrow's reader keeps some:
``1000`` for ``decimal(5,2)``; it could be native with a check of its own), ``binary``
(Jackson's base64 variants), ``map`` (pyarrow's reader has no map type), ``char``/``varchar``,
collated strings, intervals, ``variant``; a struct with no fields or with two fields whose
names differ only in case; a top-level field ``_corrupt_record`` (decode.py refuses it).

Where pyarrow's reader accepts a record that Spark reads otherwise, the record is decoded by
the parser instead: values with the tokens ``Inf``, ``-Inf`` or ``-NaN`` (rapidjson takes
them, also in skipped fields; ``NaN``, ``Infinity`` and ``-Infinity`` both read alike),
values over 1,000 bytes holding a long run of number characters or 1,000 brackets, values
over 50,000 bytes, and rows where a ``double``/``float`` came out as -0.0 (rapidjson reads
the integer ``-0`` as -0.0, Spark as 0.0). The reader refuses the rest of what it reads
otherwise (a string field given a number, integer overflow, duplicate keys, unpaired
surrogates, single quotes, ``\\'``, what follows the object), and reads floats correctly
rounded, as Java does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from pyspark.sql import types as T

from airflow_provider_kafka_spark.spark.formats.fast import Decoded, exact_cast
from airflow_provider_kafka_spark.spark.schema import utc_arrow_type

_CORRUPT_FIELD = "_corrupt_record"
_ROW = re.compile(r"in row (\d+)")
# Jackson's StreamReadConstraints as Spark's JSON factory has them (measured at the edges).
_MAX_DEPTH = 1000
_MAX_INT_DIGITS = 1000
_FP_DIGITS_UNSURE = 990
_MAX_NAME = 50_000
_MAX_STRING = 20_000_000
# pyarrow's reader is not given these values (see the module's docs).
_LONG_VALUE = 1000
_HUGE_VALUE = 50_000
_READ_BYTES = 64 << 20  # at most this much text in one read
_NUMBER_RUN = re.compile(rb"[-+.eE0-9]{%d}" % _FP_DIGITS_UNSURE)
_VALUE_START = np.zeros(256, dtype=bool)  # bytes a value can follow
_VALUE_START[list(b":,[ \t\r\n-")] = True
_DELIMITER = np.zeros(256, dtype=bool)  # bytes that can follow a value
_DELIMITER[list(b",]} \t\r\n")] = True
_MINUS = np.zeros(256, dtype=bool)
_MINUS[ord("-")] = True


class _Corrupt(Exception):
    """The record is corrupt on Spark's path."""


@dataclass(frozen=True)
class _Num:
    """A number token: its text and whether it is an integer (no fraction, no exponent)."""

    text: str
    integral: bool


@dataclass(frozen=True)
class _Special:
    """``NaN``, ``Infinity``, ``+INF``...: a floating-point token of Jackson's."""

    value: float


@dataclass(frozen=True)
class _Raw:
    """Text written as it is (by :func:`_jackson_text`)."""

    text: str


class _Obj:
    """An object's members in order, duplicates kept."""

    __slots__ = ("pairs",)

    def __init__(self) -> None:
        self.pairs: list[tuple[str, Any]] = []


# ---------------------------------------------------------------------------------------------
# The per-record parser: Jackson's grammar with Spark's JSONOptions defaults.

_WS = frozenset(" \t\n\r")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE][+-]?([0-9]+))?")
_PLAIN = {'"': re.compile(r"[^\"\\\x00-\x1f]*"), "'": re.compile(r"[^'\\\x00-\x1f]*")}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t", "'": "'"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LITERALS = (("true", True), ("false", False), ("null", None), ("NaN", _Special(math.nan)),
             ("Infinity", _Special(math.inf)), ("+INF", _Special(math.inf)),
             ("+Infinity", _Special(math.inf)), ("-INF", _Special(-math.inf)),
             ("-Infinity", _Special(-math.inf)))


def _skip_ws(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WS:
        i += 1
    return i


def _string(s: str, i: int) -> tuple[str, int]:
    """The string token at ``s[i]`` (its quote) decoded, and the index after it; surrogate
    pairs written as escapes are joined, unpaired ones kept (as Java keeps them)."""
    quote = s[i]
    plain = _PLAIN[quote]
    parts: list[str] = []
    i += 1
    n = len(s)
    while True:
        m = plain.match(s, i)
        assert m is not None
        parts.append(m.group())
        i = m.end()
        if i >= n:
            raise _Corrupt
        c = s[i]
        if c == quote:
            break
        if c != "\\" or i + 1 >= n:
            raise _Corrupt  # a raw control character, or a backslash at the end
        e = s[i + 1]
        if e == "u":
            if not _HEX4.fullmatch(s, i + 2, i + 6):
                raise _Corrupt
            parts.append(chr(int(s[i + 2:i + 6], 16)))
            i += 6
        elif e in _ESCAPES:
            parts.append(_ESCAPES[e])
            i += 2
        else:
            raise _Corrupt
    text = "".join(parts)
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text, i + 1


def _java_length(text: str) -> int:
    """The length of ``text`` in UTF-16 units (Java's ``String.length()``)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _scalar(s: str, i: int, flags: list[bool]) -> tuple[Any, int]:
    """The scalar token at ``s[i]`` and the index after it. What follows is checked by the
    caller (a separator or a closer), which is where Jackson fails for ``truex`` too."""
    c = s[i]
    if c == '"' or c == "'":
        text, i = _string(s, i)
        if len(text) > _MAX_STRING // 2 and _java_length(text) > _MAX_STRING:
            flags[0] = True
        return text, i
    if c == "-" or "0" <= c <= "9":
        m = _NUMBER.match(s, i)
        if m is not None:
            whole, fraction, exponent = m.groups()
            if fraction is None and exponent is None:
                if len(whole) > _MAX_INT_DIGITS:
                    raise _Corrupt
                return _Num(m.group(), True), m.end()
            if len(whole) + len(fraction or "") + len(exponent or "") >= _FP_DIGITS_UNSURE:
                flags[0] = True
            return _Num(m.group(), False), m.end()
    for text, value in _LITERALS:
        if s.startswith(text, i):
            return value, i + len(text)
    raise _Corrupt


def _parse(s: str, flags: list[bool]) -> _Obj:
    """The top-level object of ``s`` (what follows it is ignored, as Spark does)."""
    n = len(s)
    i = _skip_ws(s, 0)
    if i >= n or s[i] != "{":
        raise _Corrupt
    root = _Obj()
    stack: list[Any] = [root]
    i += 1
    first = True
    while stack:
        top = stack[-1]
        is_obj = type(top) is _Obj
        i = _skip_ws(s, i)
        if i >= n:
            raise _Corrupt
        c = s[i]
        if c == ("}" if is_obj else "]"):
            stack.pop()
            i += 1
            first = False
            continue
        if not first:
            if c != ",":
                raise _Corrupt
            i = _skip_ws(s, i + 1)
            if i >= n:
                raise _Corrupt
            c = s[i]
        first = False
        key = ""
        if is_obj:
            if c != '"' and c != "'":
                raise _Corrupt
            key, i = _string(s, i)
            if len(key) > _MAX_NAME // 2 and _java_length(key) > _MAX_NAME:
                raise _Corrupt
            i = _skip_ws(s, i)
            if i >= n or s[i] != ":":
                raise _Corrupt
            i = _skip_ws(s, i + 1)
            if i >= n:
                raise _Corrupt
            c = s[i]
        value: Any
        if c == "{" or c == "[":
            if len(stack) + 1 > _MAX_DEPTH:
                raise _Corrupt
            value = _Obj() if c == "{" else []
            i += 1
        else:
            value, i = _scalar(s, i, flags)
        if is_obj:
            top.pairs.append((key, value))
        else:
            top.append(value)
        if c == "{" or c == "[":
            stack.append(value)
            first = True
    return root


# ---------------------------------------------------------------------------------------------
# Spark's conversions (JacksonParser.makeConverter) of a parsed value.

_FLOAT32_OVERFLOW = Fraction((2**25 - 1) * 2**103)  # FLT_MAX + half an ulp: rounds to inf
_INTEGRAL_RANGES: dict[type[T.DataType], tuple[int, int]] = {
    T.LongType: (-2**63, 2**63 - 1),
    T.IntegerType: (-2**31, 2**31 - 1),
    T.ShortType: (-2**15, 2**15 - 1),
    T.ByteType: (-128, 255),  # Jackson's getByteValue; 128..255 wrap
}
_FLOAT_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf,
                  "+INF": math.inf, "-Infinity": -math.inf, "-INF": -math.inf}
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\ud800-\udfff\U00010000-\U0010ffff]')


def _float32(text: str, integral: bool) -> float:
    """The float32 nearest to the number ``text`` (ties to even), as a Python float."""
    negative = text.startswith("-")
    approx = float(int(text)) if integral and len(text) < 300 else float(text)
    if approx == 0.0:
        return -0.0 if negative and not integral else 0.0
    if math.isinf(approx):
        return approx
    exact = Fraction(text)
    size = abs(exact)
    if size >= _FLOAT32_OVERFLOW:
        return -math.inf if negative else math.inf
    with np.errstate(over="ignore"):
        guess = np.float32(float(size))
    candidates = {c for c in (float(guess), float(np.nextafter(guess, np.float32(np.inf))),
                              float(np.nextafter(guess, np.float32(0)))) if math.isfinite(c)}

    def rank(c: float) -> tuple[Fraction, int]:
        return abs(Fraction(c) - size), int(np.float32(c).view(np.uint32)) & 1

    best = min(candidates, key=rank)
    return -best if negative else best


def _double(node: _Num) -> float:
    if node.integral:
        try:
            return float(int(node.text))
        except OverflowError:
            return -math.inf if node.text.startswith("-") else math.inf
    return float(node.text)


def _java_string(text: str) -> str:
    """``text`` as Spark keeps it: UTF8String.fromString writes unpaired surrogates as ``?``."""
    return _SURROGATE.sub("?", text) if _SURROGATE.search(text) else text


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20:
        return _SHORT_ESCAPES.get(code) or f"\\u{code:04X}"
    if ch == '"' or ch == "\\":
        return "\\" + ch
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


def _quoted(text: str) -> str:
    """``text`` as Jackson's generator writes a string."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _jackson_text(node: Any, flags: list[bool]) -> str:
    """A non-string value as Jackson's ``copyCurrentStructure`` writes it (Spark's text of a
    string field given another JSON type). Iterative: nesting goes to 1,000."""
    out: list[str] = []
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item.text)
        elif item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif type(item) is str:
            out.append(_quoted(item))
        elif type(item) is _Num:
            if not item.integral:
                flags[0] = True  # Double.toString of the executors' JVM
                out.append(item.text)
            else:
                out.append(str(int(item.text)))
        elif type(item) is _Special:
            value = item.value
            out.append('"NaN"' if math.isnan(value) else
                       '"Infinity"' if value > 0 else '"-Infinity"')
        elif type(item) is _Obj:
            parts: list[Any] = [_Raw("{")]
            for k, (key, value) in enumerate(item.pairs):
                parts.append(_Raw(("," if k else "") + _quoted(key) + ":"))
                parts.append(value)
            parts.append(_Raw("}"))
            stack.extend(reversed(parts))
        else:
            parts = [_Raw("[")]
            for k, value in enumerate(item):
                if k:
                    parts.append(_Raw(","))
                parts.append(value)
            parts.append(_Raw("]"))
            stack.extend(reversed(parts))
    return "".join(out)


_Converter = Callable[[Any, list[bool]], Any]
"""``convert(node, flags)``: a parsed value as Spark's JacksonParser converts it to one Spark
type; raises _Corrupt where Spark fails; sets ``flags[0]`` for a value left to Spark's path."""


def _converter(spark_type: T.DataType) -> _Converter:
    """The converter of ``spark_type`` (JacksonParser.makeConverter), made once per schema."""
    if isinstance(spark_type, T.StringType):
        def string(node: Any, flags: list[bool]) -> Any:
            if node is None:
                return None
            if type(node) is str:
                return _java_string(node)
            return _jackson_text(node, flags)
        return string
    if isinstance(spark_type, T.StructType):
        fields = {f.name: _converter(f.dataType) for f in spark_type.fields}

        def struct(node: Any, flags: list[bool]) -> Any:
            if node is None:
                return None
            if type(node) is not _Obj:
                raise _Corrupt
            row: dict[str, Any] = dict.fromkeys(fields)
            for key, value in node.pairs:
                convert = fields.get(key)
                if convert is not None:
                    row[key] = convert(value, flags)
            return row
        return struct
    if isinstance(spark_type, T.ArrayType):
        element = _converter(spark_type.elementType)

        def array(node: Any, flags: list[bool]) -> Any:
            if node is None:
                return None
            if type(node) is not list:
                raise _Corrupt
            return [element(v, flags) for v in node]
        return array
    if isinstance(spark_type, T.BooleanType):
        def boolean(node: Any, flags: list[bool]) -> Any:
            if node is None or node is True or node is False:
                return node
            raise _Corrupt
        return boolean
    if isinstance(spark_type, (T.DoubleType, T.FloatType)):
        double = isinstance(spark_type, T.DoubleType)

        def floating(node: Any, flags: list[bool]) -> Any:
            if node is None:
                return None
            if type(node) is _Num:
                return _double(node) if double else _float32(node.text, node.integral)
            if type(node) is _Special:
                return node.value
            if type(node) is str and node in _FLOAT_STRINGS:
                return _FLOAT_STRINGS[node]
            raise _Corrupt
        return floating
    low, high = _INTEGRAL_RANGES[type(spark_type)]
    wrap = isinstance(spark_type, T.ByteType)

    def integral(node: Any, flags: list[bool]) -> Any:
        if node is None:
            return None
        if type(node) is not _Num or not node.integral:
            raise _Corrupt
        value = int(node.text)
        if not low <= value <= high:
            raise _Corrupt
        return value - 256 if wrap and value > 127 else value
    return integral


class _Fallback(Exception):
    """The record is left to Spark's path (see the module's docs)."""


class _Unsure(Exception):
    """Python's json module read a value near Jackson's limits: :func:`_parse` decides."""


def _json_int(text: str) -> _Num:
    if len(text) > _MAX_INT_DIGITS:
        raise _Unsure
    return _Num(text, True)


def _json_float(text: str) -> _Num:
    if len(text) >= _FP_DIGITS_UNSURE:
        raise _Unsure
    return _Num(text, False)


def _json_object(pairs: list[tuple[str, Any]]) -> _Obj:
    node = _Obj()
    node.pairs = pairs
    for key, _ in pairs:
        if len(key) > _MAX_NAME // 2:
            raise _Unsure
    return node


_CONSTANTS = {"NaN": _Special(math.nan), "Infinity": _Special(math.inf),
              "-Infinity": _Special(-math.inf)}
# Python's json module (its C scanner) reads standard JSON into the same tree as _parse, about
# ten times faster; what it refuses (single quotes, \', +INF...) _parse reads.
_JSON_DECODER = json.JSONDecoder(object_pairs_hook=_json_object, parse_int=_json_int,
                                 parse_float=_json_float, parse_constant=_CONSTANTS.__getitem__,
                                 strict=True)


def _tree(text: str, flags: list[bool]) -> _Obj:
    """The top-level object of ``text`` (see :func:`_parse`)."""
    start = _skip_ws(text, 0)
    if (start < len(text) and text[start] == "{" and len(text) < _MAX_STRING // 2
            and text.count("[") + text.count("{") < _MAX_DEPTH):
        try:
            tree, _ = _JSON_DECODER.raw_decode(text, start)
        except (ValueError, _Unsure, RecursionError):
            return _parse(text, flags)
        return tree  # type: ignore[no-any-return]
    return _parse(text, flags)


def _decode_record(raw: bytes, convert: _Converter) -> dict[str, Any]:
    """One value as Spark's path decodes it (``convert``: the schema's converter). Raises
    _Corrupt when Spark finds it corrupt, _Fallback when its value is left to Spark's path."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt from None
    flags = [False]
    row = convert(_tree(text, flags), flags)
    if flags[0]:
        raise _Fallback
    return row  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# Which schemas are native.

_ATOMIC = (T.StringType, T.LongType, T.IntegerType, T.ShortType, T.ByteType, T.DoubleType,
           T.FloatType, T.BooleanType)


def _supported(spark_type: T.DataType) -> bool:
    if isinstance(spark_type, T.StringType):
        return type(spark_type) is T.StringType and getattr(
            spark_type, "collation", "UTF8_BINARY") == "UTF8_BINARY"
    if isinstance(spark_type, _ATOMIC):
        return type(spark_type) in _ATOMIC
    if isinstance(spark_type, T.ArrayType):
        return _supported(spark_type.elementType)
    if isinstance(spark_type, T.StructType):
        names = [f.name.lower() for f in spark_type.fields]
        return bool(names) and len(set(names)) == len(names) and all(
            _supported(f.dataType) for f in spark_type.fields)
    return False


def _as_nullable(spark_type: T.DataType) -> T.DataType:
    """``spark_type`` with every field and element nullable (``from_json`` reads so)."""
    if isinstance(spark_type, T.StructType):
        return T.StructType([T.StructField(f.name, _as_nullable(f.dataType), True, f.metadata)
                             for f in spark_type.fields])
    if isinstance(spark_type, T.ArrayType):
        return T.ArrayType(_as_nullable(spark_type.elementType), True)
    return spark_type


def _has_float(spark_type: T.DataType) -> bool:
    if isinstance(spark_type, (T.DoubleType, T.FloatType)):
        return True
    if isinstance(spark_type, T.ArrayType):
        return _has_float(spark_type.elementType)
    if isinstance(spark_type, T.StructType):
        return any(_has_float(f.dataType) for f in spark_type.fields)
    return False


def _negative_zero_rows(column: pa.Array) -> np.ndarray:
    """Per row of ``column``, whether a floating-point value in it is -0.0."""
    n = len(column)
    kind = column.type
    if pa.types.is_floating(kind):
        values = column.to_numpy(zero_copy_only=False)
        return (values == 0) & np.signbit(values)  # type: ignore[no-any-return]
    if pa.types.is_struct(kind):
        rows = np.zeros(n, dtype=bool)
        for i in range(kind.num_fields):
            child = column.field(i).slice(column.offset, n)
            rows |= _negative_zero_rows(child)
        return rows
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        rows = np.zeros(n, dtype=bool)
        flat = column.flatten()
        hits = _negative_zero_rows(flat)
        if hits.any():
            parents = np.asarray(pa.compute.list_parent_indices(column))
            rows[parents[hits]] = True
        return rows
    return np.zeros(n, dtype=bool)


# ---------------------------------------------------------------------------------------------


class NativeJson:
    """The process's native decoder of one JSON schema (see the module's docs)."""

    def __init__(self, field_name: str, struct: T.StructType, schema_text: str) -> None:
        self.field = field_name
        self.struct: T.StructType = _as_nullable(struct)  # type: ignore[assignment]
        self.arrow_type = utc_arrow_type(self.struct)
        self.reason = f"{field_name} is not JSON matching the schema {schema_text}"
        self.read_schema = pa.schema(list(self.arrow_type))
        self.floats = _has_float(self.struct)
        self.convert = _converter(self.struct)
        self.counts = {"read": 0, "one_by_one": 0}
        """Records decoded so far by pyarrow's reader and by the parser here."""

    def decode(self, values: pa.Array) -> Decoded:
        """``values`` (binary or large_binary; null for a tombstone, which is not corrupt)
        decoded into a column of ``utc_arrow_type`` of the schema, Spark's path's values;
        per row, the reason a record is corrupt (decode.py's) or None; the rows left to
        Spark's path in ``fallback`` (their value null)."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks() if values.num_chunks else pa.array([], pa.binary())
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.view(pa.large_binary() if pa.types.is_large_string(values.type)
                                 else pa.binary())
        n = len(values)
        errors: list[str | None] = [None] * n
        if n == 0:
            return Decoded(pa.array([], self.arrow_type), errors, [])
        present, good_text = self._checked(values)
        candidates = self._candidates(values, good_text)
        rows = np.flatnonzero(candidates)
        segments, slow = self._read_fast(values, rows)
        parts: list[pa.Array] = []
        source = np.full(n, -1, dtype=np.int64)
        at = 0
        for lo, hi, column in segments:
            source[rows[lo:hi]] = np.arange(at, at + hi - lo)
            parts.append(column)
            at += hi - lo
        bad_text = present & ~good_text
        for row in np.flatnonzero(bad_text).tolist():
            errors[row] = self.reason
        one_by_one = np.flatnonzero(present & good_text & ~candidates).tolist()
        one_by_one += rows[slow].tolist()
        decoded: list[Any] = []
        fallback: list[int] = []
        one_by_one.sort()
        raws = values.take(pa.array(one_by_one, pa.int64())).to_pylist() if one_by_one else []
        for row, raw in zip(one_by_one, raws, strict=True):
            try:
                value = _decode_record(raw, self.convert)
            except _Corrupt:
                errors[row] = self.reason
                source[row] = -1
                continue
            except _Fallback:
                fallback.append(row)
                source[row] = -1
                continue
            source[row] = at + len(decoded)
            decoded.append(value)
        self.counts["read"] += int(np.count_nonzero((source >= 0) & (source < at)))
        self.counts["one_by_one"] += len(one_by_one)
        if decoded:
            parts.append(pa.array(decoded, self.arrow_type))
        if len(parts) == 1 and at == n and not one_by_one:
            column = parts[0]
        else:
            pool = (pa.concat_arrays(parts) if parts else pa.array([], self.arrow_type))
            indices = pa.array(source, mask=source < 0)
            column = pool.take(indices)
        return Decoded(exact_cast(column, self.arrow_type), errors, fallback)

    # -- the fast path ------------------------------------------------------------------------

    def _checked(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(non-null, non-null and valid UTF-8) per row."""
        present = values.is_valid().to_numpy(zero_copy_only=False)
        text_type = pa.large_string() if pa.types.is_large_binary(values.type) else pa.string()
        try:
            values.cast(text_type)
        except pa.ArrowInvalid:
            good = np.zeros(len(values), dtype=bool)
            for row in np.flatnonzero(present).tolist():
                try:
                    values[row].as_py().decode("utf-8")
                except UnicodeDecodeError:
                    continue
                good[row] = True
            return present, good
        return present, present.copy()

    def _candidates(self, values: pa.Array, good_text: np.ndarray) -> np.ndarray:
        """The rows pyarrow's reader is given (see the module's docs)."""
        offsets, data = _buffers(values)
        lengths = np.diff(offsets)
        ok = good_text & (lengths >= 2)
        if data.size == 0 or not ok.any():
            return ok
        ok &= _ends_with(data, offsets[:-1], offsets[1:], ok, ord("{"), 1)
        ok &= _ends_with(data, offsets[1:] - 1, offsets[:-1] - 1, ok, ord("}"), -1)
        first, end = int(offsets[0]), int(offsets[-1])
        for word, before, after in ((b"Inf", _VALUE_START, _DELIMITER), (b"NaN", _MINUS, None)):
            # rapidjson's tokens Spark refuses: Inf and -Inf (not Infinity), -NaN
            at = np.flatnonzero(data[first + 1:end - 3] == word[0]) + first + 1
            at = at[(data[at + 1] == word[1]) & (data[at + 2] == word[2])]
            at = at[before[data[at - 1]]]
            if after is not None:
                at = at[after[data[at + 3]]]
            if at.size:
                ok[np.searchsorted(offsets, at, side="right") - 1] = False
        for row in np.flatnonzero(ok & (lengths > _LONG_VALUE)).tolist():
            raw = data[offsets[row]:offsets[row + 1]].tobytes()
            if (len(raw) > _HUGE_VALUE or raw.count(b"[") + raw.count(b"{") >= _MAX_DEPTH
                    or _NUMBER_RUN.search(raw)):
                ok[row] = False
        return ok

    def _read_fast(self, values: pa.Array, rows: np.ndarray
                   ) -> tuple[list[tuple[int, int, pa.Array]], list[int]]:
        """pyarrow's reader over ``values[rows]``: the ranges of ``rows`` it read (start,
        end, column) and the positions in ``rows`` it refused or read differently."""
        m = len(rows)
        if m == 0:
            return [], []
        offsets, data = _buffers(values)
        if _contiguous(offsets, data, rows):
            # the values as they lie in the array: none holds two objects, so one that runs
            # on into the next gives fewer rows than values
            buffer = values.buffers()[2]
            bounds = np.append(offsets[rows], offsets[rows[-1] + 1])
        else:
            # newlines between the values: a string cannot run on into the next value
            chosen = values if m == len(values) else values.take(pa.array(rows))
            buffer = pa.py_buffer(b"\n".join(chosen.to_pylist()) + b"\n")
            bounds = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(offsets[rows + 1] - offsets[rows] + 1, out=bounds[1:])
        segments: list[tuple[int, int, pa.Array]] = []
        slow: list[int] = []
        work = []  # ranges of at most _READ_BYTES (values over _HUGE_VALUE are not here)
        lo = 0
        while lo < m:
            hi = int(np.searchsorted(bounds, bounds[lo] + _READ_BYTES, side="right")) - 1
            work.append((lo, max(hi, lo + 1)))
            lo = max(hi, lo + 1)
        reads = kept = 0  # reads, and rows read: at least a row per read, else one by one
        while work:
            lo, hi = work.pop()
            if lo >= hi:
                continue
            if reads > 16 + kept:
                slow.extend(range(lo, hi))
                continue
            reads += 1
            try:
                column = self._read(buffer.slice(int(bounds[lo]), int(bounds[hi] - bounds[lo])))
            except pa.ArrowInvalid as exc:
                if hi - lo == 1:
                    slow.append(lo)
                    continue
                hint = _ROW.search(str(exc))
                row = int(hint.group(1)) if hint else -1
                if 0 <= row < hi - lo:  # the row the reader refused: decoded one by one
                    slow.append(lo + row)
                    work += [(lo + row + 1, hi), (lo, lo + row)]
                else:
                    mid = (lo + hi) // 2
                    work += [(mid, hi), (lo, mid)]
                continue
            if len(column) != hi - lo:
                if hi - lo == 1:
                    slow.append(lo)
                else:
                    mid = (lo + hi) // 2
                    work += [(mid, hi), (lo, mid)]
                continue
            if self.floats:
                zeros = np.flatnonzero(_negative_zero_rows(column))
                if zeros.size:
                    slow.extend((lo + zeros).tolist())
            segments.append((lo, hi, column))
            kept += hi - lo
        segments.sort(key=lambda segment: segment[0])
        return segments, slow

    def _read(self, buffer: pa.Buffer) -> pa.Array:
        table = pa_json.read_json(
            pa.BufferReader(buffer),
            read_options=pa_json.ReadOptions(use_threads=False,
                                             block_size=max(buffer.size + 1, 1 << 16)),
            parse_options=pa_json.ParseOptions(explicit_schema=self.read_schema,
                                               unexpected_field_behavior="ignore"))
        return pa.StructArray.from_arrays(
            [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns],
            fields=list(self.arrow_type))


_JSON_SPACE = np.zeros(256, dtype=bool)
_JSON_SPACE[list(b" \t\r\n")] = True
_ROOT_START = np.zeros(256, dtype=bool)
_ROOT_START[list(b"{n")] = True


def _contiguous(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray) -> bool:
    """Whether the values ``rows`` lie side by side in ``data`` with only JSON whitespace
    between them, none holding a ``}`` followed (after JSON whitespace) by ``{`` or ``n``:
    then pyarrow's reader can read them where they are. A value that could hold a second
    object (or ``null``) after its first could make up for one that runs on into the next
    (ends inside a string), and rows and values would not line up; without such values, one
    that runs on always gives fewer rows than values."""
    starts, ends = offsets[rows], offsets[rows + 1]
    if np.any(starts[1:] != ends[:-1]):
        gaps = np.flatnonzero(starts[1:] != ends[:-1])
        for gap in gaps.tolist():  # values between the rows: blank ones do no harm
            if not _JSON_SPACE[data[ends[gap]:starts[gap + 1]]].all():
                return False
    first, end = int(starts[0]), int(ends[-1])
    closers = np.flatnonzero(data[first:end] == ord("}")) + first
    if closers.size == 0:
        return True
    row_end = ends[np.searchsorted(starts, closers, side="right") - 1]
    at = closers + 1
    left = at < row_end
    while left.any():
        here = data[np.where(left, at, 0)]
        if np.any(left & _ROOT_START[here]):
            return False
        left &= _JSON_SPACE[here]
        at = np.where(left, at + 1, at)
        left &= at < row_end
    return True


def _ends_with(data: np.ndarray, at: np.ndarray, stop: np.ndarray, rows: np.ndarray,
               byte: int, step: int) -> np.ndarray:
    """Per row, whether its first byte that is not JSON whitespace, looking from ``at``
    towards ``stop`` (exclusive) by ``step``, is ``byte``; False for the rows not in
    ``rows``."""
    at = np.where(rows, at, 0)
    found = rows & (data[at] == byte)
    left = rows & ~found & _JSON_SPACE[data[at]]
    while left.any():
        at = np.where(left, at + step, at)
        left &= at != stop
        here = data[np.where(left, at, 0)]
        found |= left & (here == byte)
        left &= _JSON_SPACE[here]
    return found


def _buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of ``values``' rows into data, data) as numpy arrays, zero-copy."""
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[
        values.offset:values.offset + len(values) + 1].astype(np.int64)
    data = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None
            else np.zeros(0, dtype=np.uint8))
    return offsets, data


_JSON: dict[tuple[str, str, str], NativeJson | None] = {}


def native_json(field_name: str, struct: T.StructType,
                schema_text: str | None = None) -> NativeJson | None:
    """The process's native decoder of ``field_name`` (``"key"``/``"value"``) as JSON of
    ``struct``, or None when Spark's ``from_json`` must decode it (see the module's docs).

    ``schema_text`` is the schema as the corrupt records' reason shows it (decode.py's
    ``_reason``): the DDL string when the user gave one, by default
    ``struct.simpleString()``."""
    shown = struct.simpleString() if schema_text is None else schema_text
    key = (field_name, struct.json(), shown)
    if key not in _JSON:
        found: NativeJson | None = None
        if (isinstance(struct, T.StructType) and _supported(struct)
                and _CORRUPT_FIELD not in [name.lower() for name in struct.names]):
            found = NativeJson(field_name, struct, shown)
        _JSON[key] = found
    return _JSON[key]
