"""Hypothesis strategies: finite types, their values, arbitrary expressions, and
well-typed linear programs (built type-directed, so the checker should accept each)."""

from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from riftco.cajal import (
    BOOL,
    UNIT,
    Case,
    Dictionary,
    DictionaryType,
    DictionaryValue,
    Expression,
    InjectLeft,
    InjectRight,
    LeftValue,
    Let,
    Lookup,
    PairValue,
    ProductType,
    Projection,
    RightValue,
    Sequence,
    SumType,
    Tuple,
    Type,
    TypeFormationError,
    Unit,
    Variable,
    can_vanish,
    enumerate_values,
    literal,
)
from riftco.cajal.values import UNIT_VALUE, Value

NAMES = ("x", "y", "z", "d", "k", "a_1", "b'", "Value", "lets", "ofs")


@lru_cache
def one_hot_types() -> st.SearchStrategy[Type]:
    return st.recursive(st.just(UNIT), lambda c: st.builds(SumType, c, c), max_leaves=4)


@lru_cache
def types(max_leaves: int = 6) -> st.SearchStrategy[Type]:
    def extend(children: st.SearchStrategy[Type]) -> st.SearchStrategy[Type]:
        return st.one_of(
            st.tuples(children, children)
            .filter(lambda p: not (can_vanish(p[0]) and can_vanish(p[1])))
            .map(lambda p: SumType(*p)),
            st.builds(ProductType, children, children),
            st.tuples(one_hot_types(), children.filter(lambda t: not can_vanish(t))).map(
                lambda p: DictionaryType(*p)
            ),
        )

    return st.recursive(st.just(UNIT), extend, max_leaves=max_leaves)


@lru_cache(maxsize=4096)
def values_of(type_: Type) -> st.SearchStrategy[Value]:
    match type_:
        case SumType(left, right):
            return st.one_of(
                values_of(left).map(lambda v: LeftValue(v, type_)),
                values_of(right).map(lambda v: RightValue(v, type_)),
            )
        case ProductType(first, second):
            return st.builds(PairValue, values_of(first), values_of(second))
        case DictionaryType(key, value):
            keys = enumerate_values(key)
            picks = st.tuples(*(st.none() | values_of(value) for _ in keys))
            return picks.map(
                lambda vs: DictionaryValue(
                    type_, tuple((k, v) for k, v in zip(keys, vs) if v is not None)
                )
            )
    return st.just(UNIT_VALUE)


def expressions() -> st.SearchStrategy[Expression]:
    """Arbitrary expressions, well-typed or not: for the parser and printer."""
    names = st.sampled_from(NAMES)
    sums = types(4).filter(lambda t: isinstance(t, SumType))
    dictionaries = st.tuples(one_hot_types(), types(3).filter(lambda t: not can_vanish(t))).map(
        lambda p: DictionaryType(*p)
    )

    def extend(c: st.SearchStrategy[Expression]) -> st.SearchStrategy[Expression]:
        return st.one_of(
            st.builds(Tuple, c, c),
            st.builds(InjectLeft, c, sums),
            st.builds(InjectRight, c, sums),
            st.builds(Dictionary, dictionaries, st.lists(st.tuples(c, c), max_size=2).map(tuple)),
            st.builds(Sequence, c, c),
            st.builds(Projection, c, st.sampled_from((0, 1))),
            st.builds(Case, c, names, c, names, c),
            st.builds(Let, names, c, c),
            st.builds(Lookup, c, c),
        )

    return st.recursive(st.just(Unit()) | names.map(Variable), extend, max_leaves=12)


CONTEXT_TYPES = (
    UNIT,
    BOOL,
    SumType(UNIT, BOOL),
    ProductType(BOOL, UNIT),
    DictionaryType(BOOL, UNIT),
    DictionaryType(BOOL, BOOL),
    ProductType(BOOL, DictionaryType(UNIT, BOOL)),
)
ONE_HOT = (UNIT, BOOL, SumType(UNIT, BOOL))
KINDS = ("tuple", "inject", "project", "sequence", "let", "case", "lookup", "dictionary")


class _Builder:
    """Builds an expression of some type that uses every variable of its context once."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.binders = 0

    def fresh(self) -> str:
        self.binders += 1
        return f"b{self.binders}"

    def split(self, env: dict[str, Type], proper: bool) -> tuple[dict, dict]:
        names = list(env)
        if proper:
            cut = self.draw(st.integers(1, len(names) - 1))
            chosen = set(self.draw(st.permutations(names))[:cut])
        else:
            chosen = {n for n in names if self.draw(st.booleans())}
        return (
            {n: t for n, t in env.items() if n in chosen},
            {n: t for n, t in env.items() if n not in chosen},
        )

    def build(self, env: dict[str, Type], depth: int) -> tuple[Expression, Type]:
        choices = []
        if not env:
            choices.append("constant")
        if len(env) == 1:
            choices.append("variable")
        if depth > 0:
            choices.extend(KINDS)
        if not choices:
            first, second = self.split(env, proper=True)
            return self.sequence_of(first, second, depth)
        kind = self.draw(st.sampled_from(choices))
        return getattr(self, kind)(env, depth - 1)

    def constant(self, env: dict, depth: int) -> tuple[Expression, Type]:
        type_ = self.draw(st.sampled_from(CONTEXT_TYPES))
        return literal(self.draw(st.sampled_from(enumerate_values(type_)))), type_

    def variable(self, env: dict, depth: int) -> tuple[Expression, Type]:
        ((name, type_),) = env.items()
        return Variable(name), type_

    def tuple(self, env: dict, depth: int) -> tuple[Expression, Type]:
        (first, first_type), (second, second_type) = self.build(env, depth), self.build(env, depth)
        return Tuple(first, second), ProductType(first_type, second_type)

    def inject(self, env: dict, depth: int) -> tuple[Expression, Type]:
        body, body_type = self.build(env, depth)
        other = self.draw(st.sampled_from((UNIT, BOOL)))
        if self.draw(st.booleans()):
            return InjectLeft(body, SumType(body_type, other)), SumType(body_type, other)
        return InjectRight(body, SumType(other, body_type)), SumType(other, body_type)

    def project(self, env: dict, depth: int) -> tuple[Expression, Type]:
        body, body_type = self.build(env, depth)
        if not isinstance(body_type, ProductType):
            body, body_type = Tuple(body, body), ProductType(body_type, body_type)
        index = self.draw(st.sampled_from((0, 1)))
        return Projection(body, index), (body_type.first, body_type.second)[index]

    def sequence(self, env: dict, depth: int) -> tuple[Expression, Type]:
        first, second = self.split(env, proper=False)
        return self.sequence_of(first, second, depth)

    def sequence_of(self, first: dict, second: dict, depth: int) -> tuple[Expression, Type]:
        body, body_type = self.build(first, depth)
        rest, rest_type = self.build(second, depth)
        return Sequence(self.consume(body, body_type), rest), rest_type

    def let(self, env: dict, depth: int) -> tuple[Expression, Type]:
        bound_env, body_env = self.split(env, proper=False)
        bound, bound_type = self.build(bound_env, depth)
        name = self.fresh()
        body, body_type = self.build({**body_env, name: bound_type}, depth)
        return Let(name, bound, body), body_type

    def case(self, env: dict, depth: int) -> tuple[Expression, Type]:
        scrutinee_env, branch_env = self.split(env, proper=False)
        scrutinee, sum_type = self.build(scrutinee_env, depth)
        if not isinstance(sum_type, SumType):
            sum_type = SumType(sum_type, UNIT)
            scrutinee = InjectLeft(scrutinee, sum_type)
        left_name, right_name = self.fresh(), self.fresh()
        left, left_type = self.build({**branch_env, left_name: sum_type.left}, depth)
        right, right_type = self.build({**branch_env, right_name: sum_type.right}, depth)
        result_type = left_type
        if left_type != right_type:
            try:
                result_type = SumType(left_type, right_type)
                left, right = InjectLeft(left, result_type), InjectRight(right, result_type)
            except TypeFormationError:
                left, right = self.consume(left, left_type), self.consume(right, right_type)
                result_type = UNIT
        return Case(scrutinee, left_name, left, right_name, right), result_type

    def lookup(self, env: dict, depth: int) -> tuple[Expression, Type]:
        dictionary_env, key_env = self.split(env, proper=False)
        dictionary, dictionary_type = self.dictionary(dictionary_env, depth)
        return Lookup(dictionary, self.key(key_env, dictionary_type.key, depth)), (
            dictionary_type.value
        )

    def dictionary(self, env: dict, depth: int) -> tuple[Expression, DictionaryType]:
        if len(env) == 1 and isinstance(next(iter(env.values())), DictionaryType):
            if self.draw(st.booleans()):
                return self.variable(env, depth)  # type: ignore[return-value]
        key_env, value_env = self.split(env, proper=False)
        value, value_type = self.build(value_env, depth)
        if can_vanish(value_type):
            value = Tuple(value, self.consume(value, value_type))
            value_type = ProductType(value_type, UNIT)
        dictionary_type = DictionaryType(self.draw(st.sampled_from(ONE_HOT)), value_type)
        entries = [(self.key(key_env, dictionary_type.key, depth), value)]
        if not key_env:
            keys = self.draw(st.permutations(enumerate_values(dictionary_type.key)))
            count = self.draw(st.integers(1, len(keys)))
            entries = [(literal(k), value) for k in keys[:count]]
        return Dictionary(dictionary_type, tuple(entries)), dictionary_type

    def key(self, env: dict, key_type: Type, depth: int) -> Expression:
        constant = literal(self.draw(st.sampled_from(enumerate_values(key_type))))
        if not env:
            return constant
        body, body_type = self.build(env, depth)
        if body_type == key_type:
            return body
        return Sequence(self.consume(body, body_type), constant)

    def consume(self, expression: Expression, type_: Type) -> Expression:
        """A Unit-typed expression that uses ``expression`` once."""
        match type_:
            case SumType(left, right):
                a, b = self.fresh(), self.fresh()
                return Case(
                    expression,
                    a,
                    self.consume(Variable(a), left),
                    b,
                    self.consume(Variable(b), right),
                )
            case ProductType(first, second):
                index = self.draw(st.sampled_from((0, 1)))
                return self.consume(Projection(expression, index), (first, second)[index])
            case DictionaryType(key, value):
                found = Lookup(
                    expression, literal(self.draw(st.sampled_from(enumerate_values(key))))
                )
                return self.consume(found, value)
        return expression


@st.composite
def programs(
    draw: st.DrawFn, max_depth: int = 3
) -> tuple[Expression, tuple[tuple[str, Type], ...], Type]:
    """(expression, ordered context, the type the builder assigned)."""
    count = draw(st.integers(0, 3))
    context = tuple((f"v{i}", draw(st.sampled_from(CONTEXT_TYPES))) for i in range(count))
    depth = draw(st.integers(0, max_depth))
    expression, type_ = _Builder(draw).build(dict(context), depth)
    return expression, context, type_
