"""The linear context checker: types every subexpression and uses every variable once.

At every node the context holds exactly the variables the node uses. Multiplicative
constructs (Sequence, Let, Lookup, a Case's scrutinee against its branches, a dictionary
entry's key against its value) split it into disjoint parts; additive ones (the parts of
a Tuple, the branches of a Case, the entries of a Dictionary) share it whole. A variable
is therefore neither dropped nor duplicated along one multiplicative path, which is
what makes the compiled map linear in each variable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from riftco.cajal.errors import (
    LinearityError,
    Rule,
    TypeCheckError,
    TypeFormationError,
)
from riftco.cajal.syntax import ast
from riftco.cajal.syntax.ast import Expression, free_variables
from riftco.cajal.syntax.printer import print_expression
from riftco.cajal.types import UNIT, DictionaryType, ProductType, SumType, Type, UnitType

Context = Sequence[tuple[str, Type]] | Mapping[str, Type]
"""An ordered context: (name, type) pairs, or a mapping in insertion order."""


def normalize_context(context: Context) -> tuple[tuple[str, Type], ...]:
    """The context as a tuple of (name, type) pairs; rejects a name declared twice."""
    pairs = tuple(context.items()) if isinstance(context, Mapping) else tuple(context)
    seen: set[str] = set()
    for name, type_ in pairs:
        ast.Variable(name)  # validates the name
        if not isinstance(type_, UnitType | SumType | ProductType | DictionaryType):
            raise TypeFormationError(f"context entry {name!r}: expected a type, found {type_!r}")
        if name in seen:
            raise LinearityError(
                name, Rule.DUPLICATE_CONTEXT_NAME, "the context declares this name twice"
            )
        seen.add(name)
    return pairs


def check(expression: Expression, context: Context = ()) -> Type:
    """The type of ``expression`` in ``context``; raises TypeCheckError or LinearityError."""
    environment = dict(normalize_context(context))
    _reject_shadowing(expression, frozenset(environment))
    used = free_variables(expression)
    for name in sorted(used - environment.keys()):
        raise LinearityError(
            name, Rule.UNBOUND, f"the program uses {name!r}, which the context does not declare"
        )
    for name, type_ in environment.items():
        if name not in used:
            raise LinearityError(
                name,
                Rule.DROPPED,
                f"the context declares {name}: {type_}, but the program never uses it; "
                "a variable can be neither dropped nor duplicated",
            )
    return _infer(expression, environment, frozenset(environment))


def _reject_shadowing(expression: Expression, scope: frozenset[str]) -> None:
    """Reject a let or case binder that reuses a name already in scope."""
    match expression:
        case ast.Let(name, bound, body):
            _reject_shadowing(bound, scope)
            _require_fresh(name, scope, "let")
            _reject_shadowing(body, scope | {name})
        case ast.Case(scrutinee, left_name, left_body, right_name, right_body):
            _reject_shadowing(scrutinee, scope)
            _require_fresh(left_name, scope, "case inl")
            _reject_shadowing(left_body, scope | {left_name})
            _require_fresh(right_name, scope, "case inr")
            _reject_shadowing(right_body, scope | {right_name})
        case ast.Dictionary(_, entries):
            for key, value in entries:
                _reject_shadowing(key, scope)
                _reject_shadowing(value, scope)
        case ast.Tuple(a, b) | ast.Sequence(a, b) | ast.Lookup(a, b):
            _reject_shadowing(a, scope)
            _reject_shadowing(b, scope)
        case ast.InjectLeft(body, _) | ast.InjectRight(body, _) | ast.Projection(body, _):
            _reject_shadowing(body, scope)


def _require_fresh(name: str, scope: frozenset[str], construct: str) -> None:
    if name in scope:
        raise LinearityError(
            name, Rule.NO_SHADOWING, f"{construct} binds {name!r}, which is already in scope"
        )


def restrict(environment: Mapping[str, Type], names: frozenset[str]) -> dict[str, Type]:
    """The part of ``environment`` that ``names`` use, in the environment's order."""
    return {name: type_ for name, type_ in environment.items() if name in names}


def _show(expression: Expression) -> str:
    text = print_expression(expression)
    return f"`{text}`" if len(text) <= 80 else f"`{text[:77]}...`"


def _split(
    environment: Mapping[str, Type],
    whole: Expression,
    construct: str,
    parts: Sequence[tuple[str, frozenset[str]]],
) -> list[dict[str, Type]]:
    """Disjoint parts of ``environment``, one per (label, used names) in ``parts``."""
    for i, (label_i, names_i) in enumerate(parts):
        for label_j, names_j in parts[i + 1 :]:
            for name in sorted(names_i & names_j):
                raise LinearityError(
                    name,
                    Rule.DUPLICATED,
                    f"{construct} splits the context between its {label_i} and its {label_j}, "
                    f"but both use {name!r} (in {_show(whole)})",
                )
    return [restrict(environment, names) for _, names in parts]


def _expect(found: Type, expected: Type, what: str, where: Expression) -> None:
    if found != expected:
        raise TypeCheckError(f"{what}: expected type {expected}, found {found} (in {_show(where)})")


def _check_binder(name: str, scope: frozenset[str], body: Expression, construct: str) -> None:
    _require_fresh(name, scope, construct)
    if name not in free_variables(body):
        raise LinearityError(
            name,
            Rule.BINDER_USED_ONCE,
            f"{construct} binds {name!r}, but its body never uses it (in {_show(body)})",
        )


def _infer(expression: Expression, env: dict[str, Type], scope: frozenset[str]) -> Type:
    match expression:
        case ast.Variable(name):
            return env[name]
        case ast.Unit():
            return UNIT
        case ast.Tuple(first, second):
            _require_shared(expression, Rule.TUPLE_SHARES_CONTEXT, "Tuple", [first, second])
            return ProductType(_infer(first, env, scope), _infer(second, env, scope))
        case ast.InjectLeft(body, sum_type):
            _expect(_infer(body, env, scope), sum_type.left, f"inl[{sum_type}]", expression)
            return sum_type
        case ast.InjectRight(body, sum_type):
            _expect(_infer(body, env, scope), sum_type.right, f"inr[{sum_type}]", expression)
            return sum_type
        case ast.Projection(body, index):
            found = _infer(body, env, scope)
            if not isinstance(found, ProductType):
                raise TypeCheckError(
                    f"{('fst', 'snd')[index]}: expected a Product (A & B), found {found} "
                    f"(in {_show(expression)})"
                )
            return (found.first, found.second)[index]
        case ast.Sequence(first, second):
            env_first, env_second = _split(
                env,
                expression,
                "Sequence",
                [("first part", free_variables(first)), ("second part", free_variables(second))],
            )
            _expect(_infer(first, env_first, scope), UNIT, "Sequence first part", expression)
            return _infer(second, env_second, scope)
        case ast.Let(name, bound, body):
            _check_binder(name, scope, body, "let")
            env_bound, env_body = _split(
                env,
                expression,
                "let",
                [
                    ("bound expression", free_variables(bound)),
                    ("body", free_variables(body) - {name}),
                ],
            )
            bound_type = _infer(bound, env_bound, scope)
            return _infer(body, {**env_body, name: bound_type}, scope | {name})
        case ast.Case():
            return _infer_case(expression, env, scope)
        case ast.Lookup(dictionary, key):
            env_dictionary, env_key = _split(
                env,
                expression,
                "Lookup",
                [("dictionary", free_variables(dictionary)), ("key", free_variables(key))],
            )
            found = _infer(dictionary, env_dictionary, scope)
            if not isinstance(found, DictionaryType):
                raise TypeCheckError(
                    f"lookup: expected a Dictionary, found {found} (in {_show(expression)})"
                )
            _expect(_infer(key, env_key, scope), found.key, "lookup key", expression)
            return found.value
        case ast.Dictionary(dictionary_type, entries):
            _require_shared_entries(expression)
            for key, value in entries:
                env_key, env_value = _split_entry(env, expression, key, value)
                _expect(_infer(key, env_key, scope), dictionary_type.key, "key", expression)
                _expect(_infer(value, env_value, scope), dictionary_type.value, "value", expression)
            return dictionary_type
    raise TypeCheckError(f"expected an expression, found {type(expression).__name__}")


def _infer_case(expression: ast.Case, env: dict[str, Type], scope: frozenset[str]) -> Type:
    scrutinee, left_name, left_body = (
        expression.scrutinee,
        expression.left_name,
        expression.left_body,
    )
    right_name, right_body = expression.right_name, expression.right_body
    _check_binder(left_name, scope, left_body, "case inl")
    _check_binder(right_name, scope, right_body, "case inr")
    left_uses = free_variables(left_body) - {left_name}
    right_uses = free_variables(right_body) - {right_name}
    for name in sorted(left_uses ^ right_uses):
        used_by, unused_by = ("inl", "inr") if name in left_uses else ("inr", "inl")
        raise LinearityError(
            name,
            Rule.CASE_BRANCHES_AGREE,
            f"the branches of a case use the same bindings, but the {used_by} branch uses "
            f"{name!r} and the {unused_by} branch does not (in {_show(expression)})",
        )
    env_scrutinee, env_branches = _split(
        env,
        expression,
        "case",
        [("scrutinee", free_variables(scrutinee)), ("branches", left_uses)],
    )
    found = _infer(scrutinee, env_scrutinee, scope)
    if not isinstance(found, SumType):
        raise TypeCheckError(
            f"case: expected a scrutinee of a Sum type (A + B), found {found} "
            f"(in {_show(expression)})"
        )
    left_type = _infer(left_body, {**env_branches, left_name: found.left}, scope | {left_name})
    right_type = _infer(right_body, {**env_branches, right_name: found.right}, scope | {right_name})
    if left_type != right_type:
        raise TypeCheckError(
            f"case: expected both branches to have one type, found {left_type} (inl branch) "
            f"and {right_type} (inr branch) (in {_show(expression)})"
        )
    return left_type


def _require_shared(
    expression: Expression, rule: Rule, construct: str, parts: list[Expression]
) -> None:
    uses = [free_variables(part) for part in parts]
    _require_same_uses(expression, rule, construct, ("part", "parts"), uses)


def _require_shared_entries(expression: ast.Dictionary) -> None:
    uses = [free_variables(key) | free_variables(value) for key, value in expression.entries]
    nouns = ("entry", "entries")
    _require_same_uses(expression, Rule.DICTIONARY_SHARES_CONTEXT, "Dictionary", nouns, uses)


def _require_same_uses(
    expression: Expression,
    rule: Rule,
    construct: str,
    nouns: tuple[str, str],
    uses: list[frozenset[str]],
) -> None:
    noun, plural = nouns
    everything = frozenset().union(*uses)
    for missing_in, names in enumerate(uses):
        for name in sorted(everything - names):
            used_in = next(i for i, other in enumerate(uses) if name in other)
            raise LinearityError(
                name,
                rule,
                f"the {plural} of a {construct} share one context, but "
                f"{name!r} is used by {noun} {used_in + 1} and not by {noun} {missing_in + 1} "
                f"(in {_show(expression)})",
            )


def _split_entry(
    env: dict[str, Type], whole: Expression, key: Expression, value: Expression
) -> tuple[dict[str, Type], dict[str, Type]]:
    key_uses, value_uses = free_variables(key), free_variables(value)
    for name in sorted(key_uses & value_uses):
        raise LinearityError(
            name,
            Rule.DICTIONARY_DISJOINT,
            f"a Dictionary entry's key and value use disjoint contexts, but both use "
            f"{name!r} (in {_show(whole)})",
        )
    return restrict(env, key_uses), restrict(env, value_uses)
