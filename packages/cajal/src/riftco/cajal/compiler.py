"""Compile a checked program into one multilinear map, an argument per context variable.

Each construct is an operation on maps whose arguments are the variables its
subexpression uses, kept in context order:

- a variable is the identity; ``()`` is the constant ``[1]`` (only in an empty context);
- a Tuple stacks its parts' outputs (both parts take the same arguments);
- ``inl``/``inr`` pad the output with zeros; ``fst``/``snd`` slice it;
- ``first; second`` is ``outer(first, second)`` (``first``'s output has length 1);
- a dictionary entry is ``outer(key, value)``, and a Dictionary sums its entries;
- ``let x = bound in body`` substitutes ``bound`` for the argument ``x`` of ``body``;
- a case substitutes each block of the scrutinee into its branch and adds the two: the
  block of the side not taken is zero, so that branch contributes nothing;
- ``d[k]`` feeds ``d`` and ``k`` into the bilinear form ``(D, k) -> sum_i k_i D[i, :]``.

Every operation is linear in each argument it keeps, so the program's map is
multilinear, and on encoded inputs it computes the encoding of the interpreter's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass

from riftco.cajal.checker import Context, check, normalize_context, restrict
from riftco.cajal.encoding import decode, encode
from riftco.cajal.errors import EvaluationError, MalformedExpressionError
from riftco.cajal.multilinear import MultilinearMap
from riftco.cajal.syntax import ast
from riftco.cajal.syntax.ast import Expression, free_variables
from riftco.cajal.types import UNIT, DictionaryType, ProductType, SumType, Type, dimension
from riftco.cajal.values import Value


def compile(expression: Expression, ordered_context: Context = ()) -> MultilinearMap:
    """The map whose argument ``i`` is the encoding of the ``i``-th context variable and
    whose output is the encoding of the program's value; checks the program first."""
    return compile_program(expression, ordered_context).map


@dataclass(frozen=True)
class CompiledProgram:
    """A compiled program with the types needed to encode its inputs and decode its output."""

    expression: Expression
    context: tuple[tuple[str, Type], ...]
    output_type: Type
    map: MultilinearMap

    def run(
        self, inputs: Mapping[str, Value] | SequenceOf[Value], tolerance: float | None = 1e-6
    ) -> Value:
        """Encode ``inputs`` (by name or in context order), apply the map, decode."""
        if isinstance(inputs, Mapping):
            missing = [name for name, _ in self.context if name not in inputs]
            if missing:
                raise EvaluationError(f"run: expected a value for each of {missing}, found none")
            inputs = [inputs[name] for name, _ in self.context]
        if len(inputs) != len(self.context):
            raise EvaluationError(f"run: expected {len(self.context)} inputs, found {len(inputs)}")
        return decode(self.output_type, self.map(*(encode(v) for v in inputs)), tolerance)


def compile_program(expression: Expression, ordered_context: Context = ()) -> CompiledProgram:
    """Check and compile ``expression``, keeping its context and output type."""
    context = normalize_context(ordered_context)
    output_type = check(expression, context)
    compiled, found = _compile(expression, dict(context))
    assert found == output_type
    return CompiledProgram(expression, context, output_type, compiled)


def _arrange(compiled: MultilinearMap, names: list[str], env: Mapping[str, Type]) -> MultilinearMap:
    """Reorder arguments named ``names`` into the order of ``env``."""
    wanted = list(env)
    if names == wanted:
        return compiled
    return compiled.permute([names.index(name) for name in wanted])


def _compile(expression: Expression, env: dict[str, Type]) -> tuple[MultilinearMap, Type]:
    """The map of ``expression`` over exactly the variables of ``env``, in ``env``'s order."""
    match expression:
        case ast.Variable(name):
            return MultilinearMap.identity(dimension(env[name])), env[name]
        case ast.Unit():
            return MultilinearMap.constant([1.0]), UNIT
        case ast.Tuple(first, second):
            first_map, first_type = _compile(first, env)
            second_map, second_type = _compile(second, env)
            return first_map.concatenate(second_map), ProductType(first_type, second_type)
        case ast.InjectLeft(body, sum_type):
            body_map, _ = _compile(body, env)
            return body_map.pad_output(0, dimension(sum_type.right)), sum_type
        case ast.InjectRight(body, sum_type):
            body_map, _ = _compile(body, env)
            return body_map.pad_output(dimension(sum_type.left), 0), sum_type
        case ast.Projection(body, index):
            body_map, product = _compile(body, env)
            assert isinstance(product, ProductType)
            split = dimension(product.first)
            if index == 0:
                return body_map.slice_output(0, split), product.first
            return body_map.slice_output(split, body_map.output_dimension), product.second
        case ast.Sequence(first, second):
            (first_map, first_names), _ = _part(first, env)
            (second_map, second_names), second_type = _part(second, env)
            combined = first_map.outer(second_map)
            return _arrange(combined, first_names + second_names, env), second_type
        case ast.Let(name, bound, body):
            (bound_map, bound_names), bound_type = _part(bound, env)
            body_env = {name: bound_type, **restrict(env, free_variables(body) - {name})}
            body_map, body_type = _compile(body, body_env)
            combined = body_map.substitute(0, bound_map)
            return _arrange(combined, bound_names + list(body_env)[1:], env), body_type
        case ast.Case():
            return _compile_case(expression, env)
        case ast.Lookup(dictionary, key):
            (dictionary_map, dictionary_names), dictionary_type = _part(dictionary, env)
            (key_map, key_names), _ = _part(key, env)
            assert isinstance(dictionary_type, DictionaryType)
            form = lookup_form(dictionary_type)
            combined = form.substitute(0, dictionary_map)
            combined = combined.substitute(dictionary_map.arity, key_map)
            return _arrange(combined, dictionary_names + key_names, env), dictionary_type.value
        case ast.Dictionary(dictionary_type, entries):
            total = MultilinearMap.zeros(
                dimension(dictionary_type), [dimension(t) for t in env.values()]
            )
            for key, value in entries:
                (key_map, key_names), _ = _part(key, env)
                (value_map, value_names), _ = _part(value, env)
                entry = _arrange(key_map.outer(value_map), key_names + value_names, env)
                total = total + entry
            return total, dictionary_type
    raise MalformedExpressionError(f"expected an expression, found {type(expression).__name__}")


def _part(
    expression: Expression, env: dict[str, Type]
) -> tuple[tuple[MultilinearMap, list[str]], Type]:
    """Compile a part of a multiplicative split over the variables it uses."""
    part_env = restrict(env, free_variables(expression))
    compiled, type_ = _compile(expression, part_env)
    return (compiled, list(part_env)), type_


def _compile_case(expression: ast.Case, env: dict[str, Type]) -> tuple[MultilinearMap, Type]:
    (scrutinee_map, scrutinee_names), sum_type = _part(expression.scrutinee, env)
    assert isinstance(sum_type, SumType)
    split = dimension(sum_type.left)
    blocks = (
        scrutinee_map.slice_output(0, split),
        scrutinee_map.slice_output(split, scrutinee_map.output_dimension),
    )
    branches = (
        (expression.left_name, expression.left_body, sum_type.left),
        (expression.right_name, expression.right_body, sum_type.right),
    )
    shared = restrict(env, free_variables(expression.left_body) - {expression.left_name})
    total: MultilinearMap | None = None
    result_type: Type = UNIT
    for block, (name, body, payload_type) in zip(blocks, branches):
        body_map, result_type = _compile(body, {name: payload_type, **shared})
        branch = _arrange(body_map.substitute(0, block), scrutinee_names + list(shared), env)
        total = branch if total is None else total + branch
    assert total is not None
    return total, result_type


def lookup_form(dictionary_type: DictionaryType) -> MultilinearMap:
    """The bilinear form ``(D, k) -> sum_i k_i * D[i, :]`` of shape ``[d_V, d_K*d_V, d_K]``:
    with a one-hot key it reads row ``i`` of the dictionary's ``d_K x d_V`` matrix."""
    key_width, value_width = dimension(dictionary_type.key), dimension(dictionary_type.value)
    data = [0.0] * (value_width * key_width * value_width * key_width)
    for j in range(value_width):
        for i in range(key_width):
            row = (i * value_width + j) * key_width + i
            data[j * key_width * value_width * key_width + row] = 1.0
    return MultilinearMap((value_width, key_width * value_width, key_width), tuple(data))
