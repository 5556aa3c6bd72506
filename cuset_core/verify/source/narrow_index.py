"""Index arithmetic in integer types too narrow for the problem's original sizes (issue 47, item 4).

Tier 2 runs shrunk sizes when the original ones do not fit. A kernel that counts in ``short`` (or
in ``int`` on a problem of more than 2^31 elements) is right there and wraps at the original sizes,
where a GPU runs it. So when tier 2 did not run the original sizes, a ``__global__`` or
``__device__`` function whose size-dependent integer variables have a type that cannot hold the
original problem's largest tensor's element count is refused with its line.

A variable is size-dependent when it is an integer parameter (a size argument), when a value
assigned to it uses ``blockIdx``, ``gridDim`` or another size-dependent variable, or when it is
compared with one (a loop counter bounded by a size, ``if (i < n)``); ``threadIdx`` and
``blockDim`` alone are bounded by a block's 1,024 threads and make nothing size-dependent. The
source is read as the compiler compiles it (``preprocessor.compiled_code``: no comments, literals or
skipped groups) with tree-sitter-cuda; ``typedef``, ``using`` and object-like ``#define`` aliases of
integer types are followed. Casts, ``auto`` and types of templates' parameters are not judged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from tree_sitter import Node

from cuset_core.analysis.scan import new_parser
from cuset_core.verify.source.preprocessor import compiled_code

# The largest value each integer type holds, by its spelling with qualifiers and spaces normalised.
_LARGEST = {
    **dict.fromkeys(("char", "signed char", "int8_t"), 2**7 - 1),
    **dict.fromkeys(("unsigned char", "uint8_t"), 2**8 - 1),
    **dict.fromkeys(("short", "short int", "signed short", "signed short int", "int16_t"), 2**15 - 1),
    **dict.fromkeys(("unsigned short", "unsigned short int", "uint16_t"), 2**16 - 1),
    **dict.fromkeys(("int", "signed", "signed int", "int32_t"), 2**31 - 1),
    **dict.fromkeys(("unsigned", "unsigned int", "uint32_t"), 2**32 - 1),
}
_IGNORED_WORDS = re.compile(r"\b(?:const|volatile|register|static|__restrict__|__restrict)\b")
_SIZE_BUILTINS = frozenset({"blockIdx", "gridDim"})
_RELATIONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_ASSIGNMENTS = frozenset({"=", "+=", "-=", "*=", "<<=", "|="})


@dataclass(frozen=True)
class NarrowIndex:
    """A size-dependent variable whose type holds less than the original problem needs: its name, its
    type as written, the largest value that type holds, and where it is declared (a character offset
    in the source)."""

    name: str
    type: str
    largest: int
    offset: int


@dataclass
class _Variable:
    type: str
    offset: int


def narrow_index(source: str, needed: int) -> NarrowIndex | None:
    """The first size-dependent integer variable of ``source``'s device functions (in source order)
    whose type holds less than ``needed`` (the original problem's largest tensor, in elements); None
    when there is none."""
    text = compiled_code(source)
    data = text.encode("utf-8")
    root = new_parser().parse(data).root_node
    aliases = _type_aliases(root)
    found: list[NarrowIndex] = []
    for function in _device_functions(root):
        for name, variable in _size_dependent(function, aliases).items():
            largest = _LARGEST.get(_resolved(variable.type, aliases))
            if largest is not None and largest < needed:
                offset = len(data[: variable.offset].decode("utf-8", errors="replace"))
                found.append(NarrowIndex(name, variable.type, largest, offset))
    return min(found, key=lambda narrow: narrow.offset, default=None)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", errors="replace")


def _normalised(type_text: str) -> str:
    return " ".join(_IGNORED_WORDS.sub(" ", type_text).split())


def _resolved(type_text: str, aliases: dict[str, str]) -> str:
    """An integer type's spelling through the source's aliases (at most a few levels)."""
    spelled = _normalised(type_text)
    for _ in range(8):
        if spelled not in aliases:
            break
        spelled = aliases[spelled]
    return spelled


def _walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _type_aliases(root: Node) -> dict[str, str]:
    """``typedef short idx;``, ``using idx = short;`` and ``#define IDX short``: alias -> type."""
    aliases: dict[str, str] = {}
    for node in _walk(root):
        if node.type == "type_definition":
            kind, declarator = node.child_by_field_name("type"), node.child_by_field_name("declarator")
            if kind is not None and declarator is not None and declarator.type == "type_identifier":
                aliases[_text(declarator)] = _normalised(_text(kind))
        elif node.type == "alias_declaration":
            name, kind = node.child_by_field_name("name"), node.child_by_field_name("type")
            if name is not None and kind is not None:
                aliases[_text(name)] = _normalised(_text(kind))
        elif node.type == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                aliases[_text(name)] = _normalised(_text(value))
    return aliases


def _device_functions(root: Node) -> Iterator[Node]:
    """Definitions of ``__global__`` and ``__device__`` functions."""
    for node in _walk(root):
        if node.type != "function_definition":
            continue
        declarator = node.child_by_field_name("declarator")
        head = (node.text or b"")[: declarator.start_byte - node.start_byte] if declarator is not None else b""
        if b"__global__" in head or b"__device__" in head:
            yield node


def _integer_declarations(function: Node, aliases: dict[str, str]) -> dict[str, _Variable]:
    """The function's parameters and locals declared with a plain integer type (not pointers or
    arrays), by name."""
    declared: dict[str, _Variable] = {}
    for node in _walk(function):
        if node.type not in ("parameter_declaration", "declaration"):
            continue
        kind = node.child_by_field_name("type")
        if kind is None or _resolved(_text(kind), aliases) not in _LARGEST:
            continue
        for declarator in node.children_by_field_name("declarator"):
            target = (
                declarator.child_by_field_name("declarator") if declarator.type == "init_declarator" else declarator
            )
            if target is not None and target.type == "identifier":
                declared.setdefault(_text(target), _Variable(_text(kind), node.start_byte))
    return declared


def _names(node: Node | None) -> set[str]:
    """The identifiers an expression reads (``blockIdx`` for ``blockIdx.x``)."""
    if node is None:
        return set()
    return {_text(n) for n in _walk(node) if n.type == "identifier"}


def _size_dependent(function: Node, aliases: dict[str, str]) -> dict[str, _Variable]:
    """The function's integer variables that hold sizes or indices into them (see the module)."""
    declared = _integer_declarations(function, aliases)
    declarator = function.child_by_field_name("declarator")
    parameters = declarator.child_by_field_name("parameters") if declarator is not None else None
    seeds = {name for name in _names(parameters) if name in declared}
    links: list[tuple[set[str], set[str]]] = []  # (targets, what they take from): each direction of a flow
    for node in _walk(function):
        if node.type == "init_declarator":
            target, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
            links.append(({_text(target)} if target is not None else set(), _names(value)))
        elif node.type == "assignment_expression" and _operator(node) in _ASSIGNMENTS:
            links.append((_names(node.child_by_field_name("left")), _names(node.child_by_field_name("right"))))
        elif node.type == "binary_expression" and _operator(node) in _RELATIONS:
            left, right = _names(node.child_by_field_name("left")), _names(node.child_by_field_name("right"))
            links += [(left, right), (right, left)]
    dependent = seeds | _SIZE_BUILTINS
    while _grew(dependent, links, set(declared)):
        pass
    return {name: variable for name, variable in declared.items() if name in dependent}


def _grew(dependent: set[str], links: list[tuple[set[str], set[str]]], declared: set[str]) -> bool:
    """Add to ``dependent`` the variables one pass over ``links`` makes size-dependent; whether it grew."""
    before = len(dependent)
    for targets, sources in links:
        if sources & dependent:
            dependent |= targets & declared
    return len(dependent) > before


def _operator(node: Node) -> str:
    operator = node.child_by_field_name("operator")
    return _text(operator) if operator is not None else ""
