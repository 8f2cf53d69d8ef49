"""Mutation operators over Python's AST: each mutant changes one site of one module (a comparison, a boolean or
arithmetic operator, a negation, an integer or boolean constant, a returned value, or a call statement removed).
Docstrings, annotations and error messages are never mutated."""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}


@dataclass(frozen=True)
class Mutant:
    """One mutation: the module it changes, the site (line and what changed) and the mutated source."""

    module: str
    line: int
    description: str
    source: str

    @property
    def id(self) -> str:
        return f"{self.module}:{self.line}:{self.description}"


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Nodes never mutated: annotations, docstrings, and everything inside `raise` statements (messages)."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign):
            skip(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            skip(node.returns)
        elif (
            isinstance(node, ast.Raise | ast.Assert)
            or (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            )
            or (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        ):
            skip(node)
    return skipped


def _sites(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(node index in walk order, description) of every mutation site."""
    skipped = _skipped_nodes(tree)
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in COMPARE_SWAPS:
                    yield index, f"compare[{i}] {type(op).__name__}->{COMPARE_SWAPS[type(op)].__name__}"
        elif isinstance(node, ast.BoolOp):
            yield index, f"boolop {type(node.op).__name__}->{'Or' if isinstance(node.op, ast.And) else 'And'}"
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in BINOP_SWAPS:
            yield index, f"binop {type(node.op).__name__}->{BINOP_SWAPS[type(node.op)].__name__}"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield index, "not removed"
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield index, f"constant {node.value}->{node.value + 1}"
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield index, f"constant {node.value}->{not node.value}"
        elif (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            yield index, "return value->None"
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            yield index, "call statement removed"


def _apply(tree: ast.AST, target: int, description: str) -> ast.AST:
    mutated = copy.deepcopy(tree)
    for index, node in enumerate(ast.walk(mutated)):
        if index != target:
            continue
        if isinstance(node, ast.Compare):
            i = int(description.split("[", 1)[1].split("]", 1)[0])
            node.ops[i] = COMPARE_SWAPS[type(node.ops[i])]()
        elif isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif isinstance(node, ast.BinOp | ast.AugAssign):
            node.op = BINOP_SWAPS[type(node.op)]()
        elif isinstance(node, ast.UnaryOp):
            node.op = ast.UAdd()  # `+x` keeps the operand's truth value: `not` is gone
            node.operand = ast.Call(ast.Name("bool", ast.Load()), [node.operand], [])
        elif isinstance(node, ast.Constant):
            node.value = (not node.value) if type(node.value) is bool else node.value + 1
        elif isinstance(node, ast.Return | ast.Expr):
            node.value = ast.Constant(None)
        return ast.fix_missing_locations(mutated)
    raise LookupError(f"no mutation site {target}")


def mutants_of(module: str, source: str) -> list[Mutant]:
    """Every mutant of one module's source, in a stable order."""
    tree = ast.parse(source)
    lines = {index: getattr(node, "lineno", 0) for index, node in enumerate(ast.walk(tree))}
    return [
        Mutant(module, lines[index], description, ast.unparse(_apply(tree, index, description)))
        for index, description in _sites(tree)
    ]
