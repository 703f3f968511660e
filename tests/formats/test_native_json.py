"""The native JSON decoder (``formats/json_arrow.py``, issue 53) gives what Spark's path gives
(``decode_kafka(df, value_format="json", ..., on_corrupt="dead_letter")``, ``from_json`` in
the JVM), record by record: the same values (NaN, -0.0 and infinities told apart), the same
corrupt records with the same reason, the same Arrow type; the records it leaves to Spark's
path are the ones its docs name. A corpus of tricky records per schema, decoded in one batch
(so pyarrow's reader refuses ranges and the parser takes over), a long mixed batch, and
records made by random edits of good ones (fixed seeds)."""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from airflow_provider_kafka_spark.spark import decode_kafka
from airflow_provider_kafka_spark.spark.formats import json_arrow
from airflow_provider_kafka_spark.spark.formats.json_arrow import NativeJson, native_json
from airflow_provider_kafka_spark.spark.schema import kafka_schema

pytestmark = [pytest.mark.formats, pytest.mark.spark]

DIGITS = b"1" * 1000
MAIN = "s string, n long, d double, b boolean"
MAIN_CASES: list[bytes | None] = [
    # good records, nulls, tombstones, not objects
    b'{"s":"x","n":1,"d":1.5,"b":true}', b"{}", b'{"s":null,"n":null,"d":null,"b":null}', None,
    b"", b" ", b"\n", b"null", b"[]", b'[{"s":"x"}]', b"5", b'"x"', b"true",
    # what follows the object is ignored; two objects in one value
    b'{"s":"x"} trailing', b'{"s":"x"}{"s":"y"}', b'{"s":"x"} {"s":"y"}', b'{"s":"x"}\n{"s":"y"}',
    b'{"s":"x"} null', b'{"s":"x"}  ', b'  {"s":"x"}', b'\t{"s":"x"}\r\n', b'\xef\xbb\xbf{"s":"x"}',
    b'{"s":"x"}}', b'{"s":"x"}\x00', b'{"s":"x"}\x00{"s":"y"}',
    # duplicate, missing, escaped and differently cased keys; whitespace and newlines
    b'{"s":"x","s":"y"}', b'{"n":1,"n":"x"}', b'{"n":"x","n":1}', b'{"S":"x","N":1}',
    b'{"\\u0073":"esc"}', b'{"s":\n"x"}', b'{\n  "s": "x",\n  "n": 2\n}', b'{"s":"x",\x00"n":1}',
    # syntax: Jackson with Spark's options
    b'{"s":"x",}', b'{"s":"x" // c\n}', b'{"s":"x" /* c */}', b'{s:"x"}', b"{'s':'x','n':2}",
    b"{'s':'a\"b'}", b'{"s":"a\\\'b"}', b'{"s":"a\tb"}', b'{"s":"x"]', b'{"s":"}', b'{"}', b'{"s"}',
    b'{"s":}', b'{"s" "x"}', b"{,}", b'{"n":1 2}', b'{"s":"x"', b"{",
    # strings: escapes, surrogates, unicode, invalid UTF-8
    b'{"s":"\\ud800"}', b'{"s":"\\udc00x"}', b'{"s":"\\ud83d\\ude00"}', b'{"s":"\\ud83d\\ude00\\ud83d"}',
    b'{"s":"\\u00e9\xc3\xa9\xf0\x9f\x98\x80"}', b'{"s":"\\u0000"}', b'{"s":"x\x00"}', b'{"s":"\x7f"}',
    b'{"s":"\\/\\b\\f\\n\\r\\t\\"\\\\"}', b'{"s":"\\x"}', b'{"s":"\\u00"}', b'{"s":"\\u00G0"}',
    b'{"s":"\xff"}', b'{"s":"\xed\xa0\x80"}', b'{"s":"\xc0\x80"}', b'{"s":"\xf4\x90\x80\x80"}',
    b'{"s":"\xe2\x82"}', b'{"s":"\xef\xbf\xbf"}',
    # a string field given other JSON types: Jackson's text of them
    b'{"s":1}', b'{"s":-0}', b'{"s":12345678901234567890123}', b'{"s":true}', b'{"s":false}',
    b'{"s":NaN}', b'{"s":-INF}', b'{"s":+INF}', b'{"s":+Infinity}', b'{"s":Infinity}',
    b'{"s":-Infinity}', b'{"s":INF}', b'{"s":Inf}', b'{"s":-NaN}',
    b'{"s":{"a" : 1, "b": [1, 2, "x\\u0001y\\/", null, true, {}], "c": {"\\u001f": '
    b'"\\u001f\\u007f\\u2028\\t\\b\\f\\r\\n\\u00e9\\ud83d\\ude00 \xc3\xa9 \\"\\\\"}}}',
    b'{"s":["\\ud800", "\\udc00x", "\xf0\x9f\x98\x80"]}', b'{"s":[NaN, -INF, +Infinity]}',
    b'{"s":[]}', b'{"s":{}}', b"{'s':{'a':'b'}}",
    # ... a fraction: left to Spark's path (the JVM's Double.toString)
    b'{"s":1.5}', b'{"s":1e2}', b'{"s":[1, 2.5]}', b'{"s":{"k":1e5}}',
    # long
    b'{"n":1.0}', b'{"n":1e2}', b'{"n":"1"}', b'{"n":9223372036854775807}',
    b'{"n":9223372036854775808}', b'{"n":-9223372036854775808}', b'{"n":-9223372036854775809}',
    b'{"n":-0}', b'{"n":00}', b'{"n":01}', b'{"n":-01}', b'{"n":+1}', b'{"n":.5}', b'{"n":1.}',
    b'{"n":1e}', b'{"n":-}', b'{"n":NaN}', b'{"n":true}', b'{"n":[1]}', b'{"n":{}}', b'{"n":""}',
    # double
    b'{"d":1}', b'{"d":-0}', b'{"d":-0.0}', b'{"d":-0e0}', b'{"d":0.1}', b'{"d":1e400}',
    b'{"d":-1e400}', b'{"d":1e-400}', b'{"d":-1e-400}', b'{"d":123456789012345678901234567890}',
    b'{"d":9223372036854775808}', b'{"d":NaN}', b'{"d":Infinity}', b'{"d":-Infinity}',
    b'{"d":+INF}', b'{"d":-INF}', b'{"d":INF}', b'{"d":Inf}', b'{"d":-Inf}', b'{"d":-NaN}',
    b'{"d":nan}', b'{"d":"NaN"}', b'{"d":"Infinity"}', b'{"d":"+INF"}', b'{"d":"-INF"}',
    b'{"d":"INF"}', b'{"d":"-Infinity"}', b'{"d":"+Infinity"}', b'{"d":"1.5"}', b'{"d":""}',
    b'{"d":true}', b'{"d":[1]}', b'{"d":1.7976931348623157e308}', b'{"d":1.7976931348623159e308}',
    b'{"d":4.9e-324}', b'{"d":2.4e-324}', b'{"d":1E5}', b'{"d":1.5e+3}', b'{"d":1.5E-3}',
    b'{"d":0.30000000000000004440892098500626161694526672363281250000001}',
    b'{"d":9007199254740993}', b'{"d":9007199254740993.0000000001}',
    b'{"d":2.2250738585072011e-308}', b'{"d":1.00000000000000011102230246251565404236316680908203125}',
    b'{"d":1.00000000000000011102230246251565404236316680908203124}', b'{"d":' + b"9" * 400 + b"}",
    b'{"d":0.' + b"0" * 500 + b"1}", b'{"d":1.5}\n', b'{"d":1.5}\r\n', b'\n\n{"d":1.5}\n\n',
    b'{"d":-0}\n', b'{"s":"x"} \n }', b'{"s":"x"}\n\x00',
    # boolean
    b'{"b":false}', b'{"b":"true"}', b'{"b":1}', b'{"b":tru}', b'{"b":True}', b'{"b":truex}',
    b'{"b":true5}', b'{"b":nul}', b'{"b":null}',
    # Jackson's limits: digits, nesting, key length
    b'{"s":"x","z":' + DIGITS + b"}", b'{"s":"x","z":' + DIGITS + b"1}",
    b'{"s":"x","z":-' + DIGITS + b"}", b'{"n":' + DIGITS + b"}", b'{"d":' + DIGITS + b"}",
    b'{"s":' + DIGITS + b"}", b'{"s":"x","z":' + b"[" * 999 + b"]" * 999 + b"}",
    b'{"s":"x","z":' + b"[" * 1000 + b"]" * 1000 + b"}", b'{"s":"' + b"a" * 60000 + b'"}',
    b'{"s":"x","' + b"k" * 50000 + b'":1}', b'{"s":"x","' + b"k" * 50001 + b'":1}',
    b'{"s":"' + b"a" * 2000 + b'","n":5}',
    # fields the schema lacks: skipped, but well-formed as Jackson reads them
    b'{"s":"x","z":Inf}', b'{"s":"x","z":-Inf}', b'{"s":"x","z":-NaN}', b'{"s":"x","z":NaN}',
    b'{"s":"x","z":[1,{"q":-Infinity}]}', b'{"s":"Info NaN Inf","z":"-Inf"}',
    b'{"s":"User Info","z":Inf}', b'{"s":"x","z":[Inf ]}', b'{"s":"x","z":Infx}',
    b'{"s":"x","z":Info}', b'{"s":"x","z":Infinit}', b'{"s":"x","z":Infinityy}',
    b'{"s":"x","z":Infinity}', b'{"s":"x","z":-Infinity}', b'{"s":"-NaN Info -Inf"}',
    b'{"s":"x","z":/*c*/1}', b'{"s":"x","z":[1,]}', b'{"s":"x","z":[,1]}', b'{"s":"x","z":1.}',
    b'{"s":"x","z":.5}', b"{\"s\":\"x\",\"z\":'q'}", b'{"s":"x","z":"\\\'"}',
    b'{"s":"x","z":"\\ud800"}', b'{"s":"x","z":"\t"}', b'{"s":"x","z":01}',
    b'{"s":"x","z":{"a":1,"a":2}}', b'{"s":"x","_corrupt_record":"bad"}', b'{"n":1,"n":null}',
    b'{"s":"x","\\u0073":"y"}', b'{"\\u0073":"y","s":"x"}',
    b'{"s":"x","' + "\N{GRINNING FACE}".encode() * 20000 + b'":1}',  # 40,000 UTF-16 units
    b'{"s":"x","' + "\N{GRINNING FACE}".encode() * 30000 + b'":1}',  # 60,000
    b'{"s":"x","' + "\N{LATIN SMALL LETTER E WITH ACUTE}".encode() * 50001 + b'":1}',
    b'{"s":"x","_corrupt_record":5}',
]
MAIN_FALLBACK = {b'{"s":1.5}', b'{"s":1e2}', b'{"s":[1, 2.5]}', b'{"s":{"k":1e5}}'}

INTEGERS = "a long, b int, c short, d byte, e float"
INTEGER_CASES: list[bytes | None] = [
    b'{"a":1,"b":1,"c":1,"d":1,"e":1}', b'{"d":127}', b'{"d":128}', b'{"d":200}', b'{"d":255}',
    b'{"d":256}', b'{"d":-128}', b'{"d":-129}', b'{"c":32767}', b'{"c":32768}', b'{"c":-32768}',
    b'{"c":-32769}', b'{"c":65535}', b'{"b":2147483647}', b'{"b":2147483648}',
    b'{"b":-2147483648}', b'{"b":-2147483649}', b'{"b":4294967295}',
    b'{"a":18446744073709551615}', b'{"d":1.0}', b'{"c":1e2}', b'{"b":"1"}',
    b'{"e":0.1}', b'{"e":-0}', b'{"e":-0.0}', b'{"e":1.000000059604644775390625}',
    b'{"e":1.00000005960464477539062500000000001}', b'{"e":16777217}',
    b'{"e":3.4028235677973366e38}', b'{"e":3.5e38}', b'{"e":1e39}', b'{"e":-1e39}',
    b'{"e":1e-46}', b'{"e":7e-46}', b'{"e":1e-45}', b'{"e":-1e-50}',
    b'{"e":7.006492321624085354618647916449580656401309709382578858785341419448955413429304e-46}',
    b'{"e":3.40282356779733661637539395458142568448e38}',
    b'{"e":123456789012345678901234567890}', b'{"e":NaN}', b'{"e":"-INF"}', b'{"e":1e400}',
    b'{"e":' + DIGITS + b"}", b'{"e":1.00000005960464477539062499999}', b'{"e":-0 }',
    b'{"e":' + b"9" * 400 + b"}",
]

NESTED = ("a struct<b: long, c: string>, d array<long>, e array<struct<f: int>>, "
          "g array<array<string>>, h array<double>")
NESTED_CASES: list[bytes | None] = [
    b'{"a": {"b": 1, "c": "x"}, "d": [1, null, 3], "e": [{"f": 1}, null, {}], '
    b'"g": [["x", null], null, []]}',
    b'{"a": null, "d": null, "e": null, "g": null}', b'{"a": {}, "d": [], "e": [], "g": [[]]}',
    b'{"a": [], "d": []}', b'{"a": {"b": "x"}}', b'{"d": 1}', b'{"d": [1.5]}', b'{"d": {"x": 1}}',
    b'{"e": [1]}', b'{"e": {"f": 1}}', b'{"g": [[1, {"a": 1}, true]]}', b'{"g": [[1.5]]}',
    b'{"a": "x"}', b'{"a": {"b": 1, "b": 2, "z": [1, {"q": NaN}]}}', b'{"a": {"b": 1, "z": [1, }}',
    b'{"zz": {"q": [1, 2, {"x": 1e999}]}, "d": [1]}', b'{"a": {"B": 1}}',
    b'{"a": {"b": 1}, "a": {"c": "y"}}', b'{"h": [-0, 0.5, -0.0, 1e400, NaN]}', b'{"h": [-0]}',
    b'{"h": [1, "NaN", null]}', b'{"a": {"b": -0}}', b'{"e": [{"f": 1, "f": 2}]}',
    b'{"a": {"_corrupt_record": "x", "b": 1}}', b'{"d": [1, 2, 3,]}',
    b"{'a': {'c': 'q'}, 'd': [1]}",
]
NESTED_FALLBACK = {b'{"g": [[1.5]]}'}


def _mixed() -> list[bytes | None]:
    """2,000 records, good ones among bad ones of every kind pyarrow refuses (or would read
    otherwise), so the fast path splits its ranges many times."""
    bad = [b'{"s":1}', b'{"n":1.5}', b'{"s":"\\ud800"}', b"{'s':'q'}", b'{"d":-0}', None,
           b'{"s":"x","z":Inf}', b"", b'{"s":"x"}{"s":"y"}', b'{"n":"7"}', b'{"d":"NaN"}',
           b'{"s":"a\\\'b"}', b'{"s":"\xff"}', b'{"b":1}', b'{"s":"t"}\n', b' {"n":3}\r\n']
    out: list[bytes | None] = []
    kinds = 0
    for i in range(2000):
        if i % 7 == 3 or i % 97 == 0:
            out.append(bad[kinds % len(bad)])
            kinds += 1
        else:
            out.append(b'{"s":"r%d","n":%d,"d":%r,"b":%s,"z":[%d,{"q":"w"}]}'
                       % (i, i * 1_000_003, i / 8, b"true" if i % 2 else b"false", i))
    return out


def _fuzzed(seeds: list[bytes], count: int, seed: int) -> list[bytes | None]:
    """``count`` records made of ``seeds`` by 1-4 random edits each (a fixed seed): JSON
    tokens, bytes and UTF-8 inserted, replaced or cut."""
    pieces = [b"{", b"}", b"[", b"]", b'"', b"'", b":", b",", b" ", b"\n", b"\t", b"\\", b"\\u",
              b"0", b"1", b"-", b"+", b".", b"e", b"E", b"N", b"a", b"I", b"n", b"f", b"i", b"t",
              b"true", b"null", b"NaN", b"Infinity", b"-INF", b"1e400", b"-0", b"\x00",
              b"\xc3\xa9", b"\xff", b"\xf0\x9f\x98\x80", b"\\ud800", b'"s"', b'"n"', b'"d"',
              b'"a"', b'"h"', b"1.5", b"255", b"9223372036854775808", b'{"c":"x"}']
    chance = random.Random(seed)
    out: list[bytes | None] = []
    for _ in range(count):
        value = bytearray(chance.choice(seeds))
        for _ in range(chance.randint(1, 4)):
            at, piece, edit = chance.randint(0, len(value)), chance.choice(pieces), chance.random()
            if edit < 0.4:
                value[at:at] = piece
            elif edit < 0.7:
                del value[at:at + chance.randint(1, 3)]
            else:
                value[at:at + len(piece)] = piece
        out.append(bytes(value))
    return out


FUZZ_MAIN = [b'{"s":"x","n":1,"d":1.5,"b":true}', b'{"s":{"k":[1,"v",null]},"n":-7,"d":-0.0}',
             b"{'s':'q','b':false,'z':[1,2]}", b'{"d":"NaN","n":255,"s":12}']
FUZZ_NESTED = [b'{"a": {"b": 1, "c": "x"}, "d": [1, null, 3], "e": [{"f": 1}, null, {}], '
               b'"g": [["x", null], null, []], "h": [1.5, -0, 0.1]}',
               b'{"h":[3.4e38, 1e-46], "g":[["\\u00e9"]]}']


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN and -0.0 apart from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _spark_path(spark: Any, schema: str | T.StructType, values: list[bytes | None]
                ) -> pa.Table:
    rows = [(None, v, "t", 0, i, None, 0) for i, v in enumerate(values)]
    df = spark.createDataFrame(rows, kafka_schema(include_headers=False))
    out = decode_kafka(df, value_format="json", value_schema=schema, on_corrupt="dead_letter")
    return out.select("offset", "value", "decode_error").toArrow().sort_by("offset")


def _check_against_spark(spark: Any, schema: str | T.StructType, values: list[bytes | None],
                         fallback: set[bytes] | None) -> NativeJson:
    """Spark's path and the native decoder on ``values``: the same, record by record;
    ``fallback``, the values left to Spark's path (None: any)."""
    struct = T.StructType.fromDDL(schema) if isinstance(schema, str) else schema
    decoder = native_json("value", struct, schema if isinstance(schema, str) else None)
    assert decoder is not None
    want = _spark_path(spark, schema, values)
    got = decoder.decode(pa.array(values, pa.binary()))
    assert got.values.type == want.schema.field("value").type
    assert len(got.values) == len(got.errors) == len(values)
    spark_values = want.column("value").to_pylist()
    spark_errors = want.column("decode_error").to_pylist()
    native_values = got.values.to_pylist()
    if fallback is not None:
        assert sorted({values[row] for row in got.fallback}) == sorted(
            v for v in fallback if v in values)
    for row, value in enumerate(values):
        if row in got.fallback:
            assert native_values[row] is None and got.errors[row] is None
            continue
        assert got.errors[row] == spark_errors[row], (row, value)
        assert _same(native_values[row], spark_values[row]), (row, value, native_values[row],
                                                              spark_values[row])
    return decoder


@pytest.mark.parametrize(("schema", "values", "fallback"), [
    (MAIN, MAIN_CASES, MAIN_FALLBACK),
    (INTEGERS, INTEGER_CASES, set()),
    (NESTED, NESTED_CASES, NESTED_FALLBACK),
    (MAIN, _mixed(), set()),
    # values read where they lie in the array: one ends inside a string and runs on into the
    # next; with a value holding two objects (or null) they are joined by newlines instead
    (MAIN, [b'{"s":"}', b'{","n":1}', b'{"s":"x"}', b'{"s":"a"} ', b' {"s":"}"}', b"  ", None,
            b'{"s":"b","n":2}', b"", b'{"s":"}', b'{"}', b'{"n":3}'], set()),
    (MAIN, [b'{"s":"}', b'{","n":1}', b'{"s":"x"}{"s":"y"}', b'{"s":"a"}', b'{"s":"}"} null',
            b'{"s":"b","n":2}'], set()),
    (MAIN, _fuzzed(FUZZ_MAIN, 3000, 1), None),
    (NESTED.replace("h array<double>", "h array<float>"), _fuzzed(FUZZ_NESTED, 3000, 2), None),
], ids=["scalars", "integers-and-float", "nested", "mixed-2000", "side-by-side",
        "two-objects", "fuzzed-3000", "fuzzed-nested-3000"])
def test_native_json_gives_sparks_values_and_corrupt_records(
        spark: Any, schema: str, values: list[bytes | None], fallback: set[bytes] | None
) -> None:
    _check_against_spark(spark, schema, values, fallback)


def test_a_struct_type_with_required_fields_gives_sparks_nullable_type_and_reason(
        spark: Any) -> None:
    struct = T.StructType([
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("tags", T.ArrayType(T.StringType(), containsNull=False), nullable=False),
        T.StructField("inner", T.StructType([T.StructField("x", T.DoubleType(), False)]))])
    values: list[bytes | None] = [b'{"id":1,"tags":["a"],"inner":{"x":0.5}}', b"{}",
                                  b'{"id":"x"}', b'{"tags":[null]}', None]
    decoder = _check_against_spark(spark, struct, values, set())
    assert decoder.reason == ("value is not JSON matching the schema "
                              "struct<id:bigint,tags:array<string>,inner:struct<x:double>>")


def test_good_records_take_pyarrows_reader_whole() -> None:
    struct = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType()),
                           T.StructField("score", T.DoubleType())])
    decoder = NativeJson("value", struct, "id long, name string, score double")
    values = [b'{"id":%d,"name":"n%d","score":%d.5,"extra":{"a":[1,"x"]}}' % (i, i, i)
              for i in range(5000)]
    got = decoder.decode(pa.array(values, pa.binary()))
    assert decoder.counts == {"read": 5000, "one_by_one": 0}
    assert got.errors == [None] * 5000 and got.fallback == []
    assert got.values.to_pylist()[4999] == {"id": 4999, "name": "n4999", "score": 4999.5}
    # large_binary, chunked and sliced input give the same column
    for same in (pa.array(values, pa.large_binary()),
                 pa.chunked_array([values[:10], values[10:]], pa.binary()),
                 pa.array([b"x", *values], pa.binary()).slice(1)):
        again = decoder.decode(same)
        assert again.values.equals(got.values) and again.errors == got.errors
    # a value holding two objects: the batch is joined by newlines, that value decoded alone
    decoder.counts.update(read=0, one_by_one=0)
    two = decoder.decode(pa.array([*values[:3], b'{"id":1}{"id":2}'], pa.binary()))
    assert decoder.counts == {"read": 3, "one_by_one": 1}
    assert two.values.to_pylist()[3] == {"id": 1, "name": None, "score": None}
    empty = decoder.decode(pa.array([], pa.binary()))
    assert len(empty.values) == 0 and empty.values.type == decoder.arrow_type


def test_native_json_is_none_where_spark_reads_otherwise() -> None:
    def struct(*types: T.DataType) -> T.StructType:
        return T.StructType([T.StructField(f"f{i}", t) for i, t in enumerate(types)])

    for unsupported in (T.TimestampType(), T.TimestampNTZType(), T.DateType(),
                        T.DecimalType(10, 2), T.BinaryType(), T.MapType(T.StringType(),
                                                                        T.LongType()),
                        T.CharType(3), T.VarcharType(3), T.NullType(),
                        T.DayTimeIntervalType(), T.ArrayType(T.DateType()),
                        struct(T.StringType(), T.TimestampType()), T.StructType()):
        assert native_json("value", struct(T.LongType(), unsupported)) is None, unsupported
    assert native_json("value", T.StructType([T.StructField("a", T.LongType()),
                                              T.StructField("A", T.LongType())])) is None
    assert native_json("value", struct(T.StringType("UTF8_LCASE"))) is None
    assert native_json("value", T.StructType([T.StructField("_Corrupt_Record",
                                                            T.StringType())])) is None
    supported = struct(T.StringType(), T.LongType(), T.IntegerType(), T.ShortType(),
                       T.ByteType(), T.DoubleType(), T.FloatType(), T.BooleanType(),
                       T.ArrayType(struct(T.ArrayType(T.StringType()))))
    decoder = native_json("value", supported, "my schema")
    assert decoder is not None and native_json("value", supported, "my schema") is decoder
    assert decoder.reason == "value is not JSON matching the schema my schema"


def _same_tree(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, json_arrow._Obj):
        return len(a.pairs) == len(b.pairs) and all(
            k == j and _same_tree(v, w) for (k, v), (j, w) in zip(a.pairs, b.pairs, strict=True))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_tree(v, w) for v, w in zip(a, b, strict=True))
    if isinstance(a, json_arrow._Special):
        return _same(a.value, b.value)
    return bool(a == b)


def test_pythons_json_module_reads_what_it_takes_as_the_jackson_grammar_parser_does() -> None:
    """One by one, records go to Python's json module first, to the Jackson-grammar parser
    when it refuses them: where it takes a record, both give the same tree."""
    taken = 0
    for raw in _fuzzed([*FUZZ_MAIN, *FUZZ_NESTED, *(v for v in MAIN_CASES if v)], 20000, 3):
        assert raw is not None
        try:
            text = raw.decode("utf-8")
            start = json_arrow._skip_ws(text, 0)
            if text[start:start + 1] != "{":
                continue
            tree, _ = json_arrow._JSON_DECODER.raw_decode(text, start)
        except (ValueError, json_arrow._Unsure, RecursionError):
            continue
        taken += 1
        assert _same_tree(tree, json_arrow._parse(text, [False])), raw
    assert taken > 1000
