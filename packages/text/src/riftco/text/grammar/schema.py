"""JSON Schema (a subset) to grammar nodes; see the package README for the subset."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riftco.text.grammar.errors import GrammarLimitError, SchemaError
from riftco.text.grammar.nodes import (
    ARRAY,
    BOOLEAN,
    INF,
    NULL,
    NUMBER,
    OBJECT,
    STRING,
    Graph,
    List,
    Literals,
    Map,
    Number,
    Object,
    PatternString,
    String,
    Union,
)
from riftco.text.grammar.regex import compile_pattern


@dataclass(frozen=True)
class GrammarLimits:
    """Bounds on what a schema may ask for; beyond them it is refused typed.

    Compile time and memory are linear in the schema (each schema object is
    compiled once, each ``$ref`` target once), so these bounds bound both.
    """

    max_schema_objects: int = 4096  # schema objects visited while compiling
    max_schema_depth: int = 64  # nesting of schema objects inside one another
    max_depth: int = 24  # nesting of values in a generated document
    max_properties: int = 256  # declared properties of one object
    max_enum: int = 1024  # values of one enum
    max_literal_bytes: int = 1 << 16  # bytes of every enum and const value together
    max_alternatives: int = 64  # branches of one union (anyOf, oneOf, type lists), flattened
    max_length: int = 1 << 16  # largest minLength / maxLength / minItems / maxItems
    max_pattern_states: int = 512  # DFA states of one pattern
    max_stacks: int = 512  # parses side by side while decoding
    max_states: int = 1 << 14  # interned automaton states before the table is dropped
    mask_cache_bytes: int = 32 << 20  # memory for cached token masks

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GrammarLimits.{name}: expected a positive int; found {value!r}")


KINDS = (OBJECT, ARRAY, STRING, NUMBER, "integer", BOOLEAN, NULL)

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
    }
)
COMBINATORS = frozenset({"$ref", "anyOf", "oneOf", "allOf"})
LITERAL_KEYS = frozenset({"enum", "const"})
BY_KIND = {
    OBJECT: frozenset({"properties", "required", "additionalProperties"}),
    ARRAY: frozenset({"items", "minItems", "maxItems"}),
    STRING: frozenset({"minLength", "maxLength", "pattern", "format"}),
}
SUPPORTED = (
    ANNOTATIONS | COMBINATORS | LITERAL_KEYS | {"type"} | frozenset().union(*BY_KIND.values())
)
REASONS = {
    "minimum": "numeric bounds are not supported",
    "maximum": "numeric bounds are not supported",
    "exclusiveMinimum": "numeric bounds are not supported",
    "exclusiveMaximum": "numeric bounds are not supported",
    "multipleOf": "multipleOf is not supported",
    "prefixItems": "tuple arrays are not supported; use items",
    "uniqueItems": "uniqueItems is not supported",
    "patternProperties": "patternProperties is not supported",
    "nullable": 'nullable is OpenAPI, not JSON Schema; use "type": [..., "null"]',
    "not": "not is not supported",
    "if": "conditionals are not supported",
}


_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
# Every day of every month but 29 February, so no calendar check is needed.
_DATE = (
    r"[12]\d{3}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
)
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# Formats generated as patterns (each a subset of what the format allows).
FORMATS = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}T{_TIME}$",
    "uuid": r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    "ipv4": rf"^(?:{_OCTET}\.){{3}}{_OCTET}$",
    "email": r"^[a-z0-9._+-]{1,32}@[a-z0-9-]{1,32}(?:\.[a-z0-9-]{1,32}){0,3}\.[a-z]{2,8}$",
}


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _kind_of(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    if isinstance(value, dict):
        return OBJECT
    raise TypeError(type(value).__name__)


class Compiler:
    """Builds one grammar from one schema document."""

    def __init__(self, document: Any, limits: GrammarLimits, graph: Graph) -> None:
        self.document = document
        self.limits = limits
        self.graph = graph
        self.visited = 0
        self.depth = 0
        self.literal_bytes = 0
        self.refs: dict[str, int] = {}
        self.one_of: list[tuple[int, str]] = []
        self._any: int | None = None

    # -- shared nodes ------------------------------------------------------------

    def add(self, node: Any) -> int:
        if len(self.graph.nodes) >= 8 * self.limits.max_schema_objects + 64:
            raise GrammarLimitError("too many grammar nodes", path="#")
        return self.graph.add(node)

    def any_value(self) -> int:
        """Any JSON value (objects and arrays nest up to the depth limit)."""
        if self._any is None:
            union = Union([])
            self._any = self.add(union)
            string = self.add(String())
            union.options = [
                self.add(Map(string, self._any)),
                self.add(List(self._any)),
                string,
                self.add(Number(integer=False)),
                self.add(Literals([b"true", b"false", b"null"], {BOOLEAN, NULL})),
            ]
        return self._any

    def json_object(self) -> int:
        return self.add(Map(self.add(String()), self.any_value()))

    # -- schemas -----------------------------------------------------------------

    def compile(self, schema: Any, path: str) -> int:
        if self.depth >= self.limits.max_schema_depth:
            raise GrammarLimitError(
                f"expected schemas nested at most {self.limits.max_schema_depth} deep "
                "(GrammarLimits.max_schema_depth)",
                path=path[:200],
            )
        self.depth += 1
        try:
            return self._compile(schema, path)
        finally:
            self.depth -= 1

    def _compile(self, schema: Any, path: str) -> int:
        self.visited += 1
        if self.visited > self.limits.max_schema_objects:
            raise GrammarLimitError(
                f"expected at most {self.limits.max_schema_objects} schema objects "
                "(GrammarLimits.max_schema_objects)",
                path=path,
            )
        if schema is True:
            return self.any_value()
        if schema is False:
            return self.add(Union([]))
        if not isinstance(schema, Mapping):
            raise SchemaError(
                f"expected a schema (an object or a boolean); found {type(schema).__name__}",
                path=path,
            )
        for key in schema:
            if key not in SUPPORTED:
                reason = REASONS.get(key, "this keyword is not in the supported subset")
                raise SchemaError(f"unsupported keyword {key!r}: {reason}", keyword=key, path=path)
        keys = set(schema) - ANNOTATIONS
        combinators = keys & COMBINATORS
        if combinators:
            if len(keys) > 1:
                others = sorted(keys - {min(combinators)})
                raise SchemaError(
                    f"expected {min(combinators)!r} alone (besides annotations); found also "
                    f"{others}",
                    keyword=min(combinators),
                    path=path,
                )
            (keyword,) = combinators
            return self._combinator(keyword, schema[keyword], path)
        if keys & LITERAL_KEYS:
            return self._literals(schema, keys, path)
        return self._typed(schema, path)

    def _combinator(self, keyword: str, value: Any, path: str) -> int:
        where = f"{path}/{keyword}"
        if keyword == "$ref":
            return self._ref(value, path)
        if not isinstance(value, list) or not value:
            raise SchemaError(
                f"{keyword}: expected a non-empty list of schemas; found {value!r:.80}",
                keyword=keyword,
                path=path,
            )
        if keyword == "allOf":
            if len(value) != 1:
                raise SchemaError(
                    f"allOf: only a single schema is supported; found {len(value)}",
                    keyword=keyword,
                    path=path,
                )
            return self.compile(value[0], f"{where}/0")
        if len(value) > self.limits.max_alternatives:
            raise GrammarLimitError(
                f"{keyword}: expected at most {self.limits.max_alternatives} branches "
                f"(GrammarLimits.max_alternatives); found {len(value)}",
                keyword=keyword,
                path=path,
            )
        union = self.add(
            Union([self.compile(branch, f"{where}/{i}") for i, branch in enumerate(value)])
        )
        if keyword == "oneOf":
            self.one_of.append((union, where))
        return union

    def _ref(self, ref: Any, path: str) -> int:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise SchemaError(
                f"$ref: expected a local reference ('#' or '#/...'); found {ref!r:.80}",
                keyword="$ref",
                path=path,
            )
        if ref in self.refs:
            return self.refs[ref]
        target: Any = self.document
        for raw in ref[2:].split("/") if ref != "#" else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise SchemaError(
                    f"$ref: {ref!r} does not resolve (no {part!r})", keyword="$ref", path=path
                )
        alias = Union([])
        node = self.add(alias)
        self.refs[ref] = node
        alias.options = [self.compile(target, ref)]
        return node

    def _literals(self, schema: Mapping[str, Any], keys: set[str], path: str) -> int:
        extra = keys - LITERAL_KEYS - {"type"}
        if extra:
            raise SchemaError(
                f"enum and const combine only with type; found also {sorted(extra)}",
                keyword=min(extra),
                path=path,
            )
        values: list[Any] | None = None
        if "enum" in schema:
            enum = schema["enum"]
            if not isinstance(enum, list) or not enum:
                raise SchemaError(
                    f"enum: expected a non-empty list; found {enum!r:.80}",
                    keyword="enum",
                    path=path,
                )
            if len(enum) > self.limits.max_enum:
                raise GrammarLimitError(
                    f"enum: expected at most {self.limits.max_enum} values "
                    f"(GrammarLimits.max_enum); found {len(enum)}",
                    keyword="enum",
                    path=path,
                )
            values = list(enum)
        if "const" in schema:
            const = schema["const"]
            values = [v for v in values if _equal(v, const)] if values is not None else [const]
        assert values is not None
        kinds = self._types(schema, path)
        encoded: list[bytes] = []
        found: set[str] = set()
        for value in values:
            try:
                kind = _kind_of(value)
                data = _json_bytes(value)
            except (TypeError, ValueError):
                raise SchemaError(
                    f"expected JSON values in enum/const; found {value!r:.80}",
                    keyword="enum",
                    path=path,
                ) from None
            if kinds is not None and not _kind_allowed(kind, value, kinds):
                continue
            self.literal_bytes += len(data)
            if self.literal_bytes > self.limits.max_literal_bytes:
                raise GrammarLimitError(
                    f"expected enum and const values of at most {self.limits.max_literal_bytes} "
                    "bytes in all (GrammarLimits.max_literal_bytes)",
                    keyword="enum",
                    path=path,
                )
            encoded.append(data)
            found.add(NUMBER if kind == "integer" else kind)
        if not encoded:
            raise SchemaError(
                "enum/const: no value satisfies the schema's type", keyword="enum", path=path
            )
        return self.add(Literals(encoded, found))

    def _types(self, schema: Mapping[str, Any], path: str) -> list[str] | None:
        if "type" not in schema:
            return None
        kinds = schema["type"]
        listed = kinds if isinstance(kinds, list) else [kinds]
        if (
            not listed
            or not all(isinstance(k, str) and k in KINDS for k in listed)
            or len(set(listed)) != len(listed)
        ):
            raise SchemaError(
                f"type: expected one of {list(KINDS)} or a list of distinct ones; "
                f"found {kinds!r:.80}",
                keyword="type",
                path=path,
            )
        return list(listed)

    def _typed(self, schema: Mapping[str, Any], path: str) -> int:
        kinds = self._types(schema, path)
        if kinds is None:
            # No type: any value, but keywords of one family say which kinds they shape;
            # a document of another kind would be valid, we just do not generate one.
            implied = [kind for kind, keys in BY_KIND.items() if keys & set(schema)]
            if not implied:
                return self.any_value()
            kinds = implied
        options = [self._kind(kind, schema, path) for kind in kinds]
        if len(options) == 1:
            return options[0]
        return self.add(Union(options))

    def _kind(self, kind: str, schema: Mapping[str, Any], path: str) -> int:
        if kind == OBJECT:
            return self._object(schema, path)
        if kind == ARRAY:
            item = schema.get("items", True)
            if isinstance(item, list):
                raise SchemaError(
                    "items: tuple form (a list) is not supported; use one schema",
                    keyword="items",
                    path=path,
                )
            low = self._count(schema, "minItems", 0, path)
            high = self._count(schema, "maxItems", None, path)
            if high is not None and low > high:
                raise SchemaError(
                    f"minItems {low} exceeds maxItems {high}", keyword="minItems", path=path
                )
            child = self.compile(item, f"{path}/items")
            return self.add(List(child, low, high))
        if kind == STRING:
            low = self._count(schema, "minLength", 0, path)
            high = self._count(schema, "maxLength", None, path)
            if high is not None and low > high:
                raise SchemaError(
                    f"minLength {low} exceeds maxLength {high}", keyword="minLength", path=path
                )
            if "format" in schema:
                name = schema["format"]
                if not isinstance(name, str) or name not in FORMATS or "pattern" in schema:
                    reason = (
                        "format with pattern is not supported"
                        if isinstance(name, str) and name in FORMATS
                        else f"supported formats are {sorted(FORMATS)}"
                    )
                    raise SchemaError(f"format {name!r:.40}: {reason}", keyword="format", path=path)
                return self._pattern(FORMATS[name], low, high, path)
            if "pattern" in schema:
                return self._pattern(schema["pattern"], low, high, path)
            return self.add(String(low, high))
        if kind in (NUMBER, "integer"):
            return self.add(Number(integer=kind == "integer"))
        if kind == BOOLEAN:
            return self.add(Literals([b"true", b"false"], {BOOLEAN}))
        return self.add(Literals([b"null"], {NULL}))

    def _pattern(self, pattern: Any, low: int, high: int | None, path: str) -> int:
        dfa = compile_pattern(pattern, self.limits.max_pattern_states, path)
        if high is not None and high * len(dfa.table) > 1 << 20:
            raise GrammarLimitError(
                f"pattern with maxLength {high}: too many length states to check "
                f"({len(dfa.table)} automaton states)",
                keyword="maxLength",
                path=path,
            )
        node = PatternString(dfa, low, high)
        if not node.possible():
            raise SchemaError(
                "no string matches the pattern within minLength and maxLength",
                keyword="pattern",
                path=path,
            )
        return self.add(node)

    def _count(self, schema: Mapping[str, Any], key: str, default: Any, path: str) -> Any:
        if key not in schema:
            return default
        value = schema[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SchemaError(
                f"{key}: expected a non-negative integer; found {value!r:.80}",
                keyword=key,
                path=path,
            )
        if value > self.limits.max_length:
            raise GrammarLimitError(
                f"{key}: expected at most {self.limits.max_length} "
                f"(GrammarLimits.max_length); found {value}",
                keyword=key,
                path=path,
            )
        return value

    def _object(self, schema: Mapping[str, Any], path: str) -> int:
        properties = schema.get("properties")
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(
                f"required: expected a list of strings; found {required!r:.80}",
                keyword="required",
                path=path,
            )
        if properties is None:
            if required:
                raise SchemaError(
                    f"required names {sorted(required)} but the object declares no properties",
                    keyword="required",
                    path=path,
                )
            if extra is False:
                return self.add(Object([]))
            value = self.compile(extra, f"{path}/additionalProperties")
            return self.add(Map(self.add(String()), value))
        if not isinstance(properties, Mapping):
            raise SchemaError(
                f"properties: expected an object; found {type(properties).__name__}",
                keyword="properties",
                path=path,
            )
        if len(properties) > self.limits.max_properties:
            raise GrammarLimitError(
                f"properties: expected at most {self.limits.max_properties} "
                f"(GrammarLimits.max_properties); found {len(properties)}",
                keyword="properties",
                path=path,
            )
        missing = sorted(set(required) - set(properties))
        if missing:
            raise SchemaError(
                f"required names {missing}, which properties does not declare",
                keyword="required",
                path=path,
            )
        if not (isinstance(extra, bool) or isinstance(extra, Mapping)):
            raise SchemaError(
                f"additionalProperties: expected a boolean or a schema; found {extra!r:.80}",
                keyword="additionalProperties",
                path=path,
            )
        entries = []
        for name, sub in properties.items():
            pointer = f"{path}/properties/{_escape(name)}"
            entries.append((_json_bytes(name), self.compile(sub, pointer), name in required))
        return self.add(Object(entries))

    # -- checks after the graph is complete --------------------------------------

    def check(self, root: int) -> None:
        graph = self.graph
        graph.finish(self.limits.max_depth, self.limits.max_stacks)
        for union in graph.nodes:
            if isinstance(union, Union) and len(union.flat) > self.limits.max_alternatives:
                raise GrammarLimitError(
                    f"expected unions of at most {self.limits.max_alternatives} branches once "
                    f"nested unions are flattened (GrammarLimits.max_alternatives); found "
                    f"{len(union.flat)}",
                    keyword="anyOf",
                )
        height = graph.heights[root]
        if height >= INF:
            raise SchemaError("the schema admits no finite document (impossible or endless)")
        if height > self.limits.max_depth:
            raise GrammarLimitError(
                f"the smallest document nests more than {self.limits.max_depth} values deep "
                "(GrammarLimits.max_depth)"
            )
        width = max(graph.widths[alt] for alt in [root, *graph.alternatives(root)])
        if width > self.limits.max_stacks:
            raise GrammarLimitError(
                f"overlapping unions could keep more than {self.limits.max_stacks} parses side "
                "by side (GrammarLimits.max_stacks); make anyOf branches differ in their "
                "first byte (type) or nest fewer of them",
                keyword="anyOf",
            )
        for union_id, where in self.one_of:
            self._check_one_of(union_id, where)

    def _check_one_of(self, union_id: int, where: str) -> None:
        nodes = self.graph.nodes
        union = nodes[union_id]
        assert isinstance(union, Union)
        branches = [(o, self._kinds_of(o)) for o in union.options]
        for i, (a, kinds_a) in enumerate(branches):
            for b, kinds_b in branches[i + 1 :]:
                if not kinds_a & kinds_b:
                    continue
                la, lb = self._literal_set(a), self._literal_set(b)
                if la is not None and lb is not None and not la & lb:
                    continue
                raise SchemaError(
                    "oneOf: branches that can match the same value are not supported "
                    "(they must differ in type, or be disjoint enums); use anyOf",
                    keyword="oneOf",
                    path=where,
                )

    def _kinds_of(self, node_id: int) -> frozenset[str]:
        out: set[str] = set()
        for alt in self.graph.alternatives(node_id):
            out |= self.graph.nodes[alt].kinds
        return frozenset(out)

    def _literal_set(self, node_id: int) -> set[Any] | None:
        """The values a node of literals stands for, keyed as JSON Schema compares them
        (``1`` and ``1.0`` are one value, ``true`` and ``1`` two)."""
        out: set[Any] = set()
        for alt in self.graph.alternatives(node_id):
            node = self.graph.nodes[alt]
            if not isinstance(node, Literals):
                return None
            out |= {_value_key(json.loads(value)) for value in node.values}
        return out


def _value_key(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, float) and value.is_integer():
        return ("number", int(value))
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_value_key(v) for v in value))
    return ("object", frozenset((k, _value_key(v)) for k, v in value.items()))


def _kind_allowed(kind: str, value: Any, kinds: list[str]) -> bool:
    if kind in kinds:
        return True
    if kind == "integer" and NUMBER in kinds:
        return True
    if kind == NUMBER and "integer" in kinds:
        return math.isfinite(value) and float(value).is_integer()
    return False


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def compile_schema(
    schema: Mapping[str, Any] | bool | None,
    limits: GrammarLimits,
    max_whitespace: int,
) -> tuple[Graph, int]:
    """The grammar of documents valid against ``schema`` (``None``: any JSON object)."""
    graph = Graph(max_whitespace)
    compiler = Compiler(schema, limits, graph)
    root = compiler.json_object() if schema is None else compiler.compile(schema, "#")
    compiler.check(root)
    return graph, root
