"""Parse one CUDA/C++ source with tree-sitter-cuda and find its sensitive spans.

Everything here works in the source's own coordinates; ``analyze.py`` maps the results into the
answer. One pre-order walk per source does the work; a function body is scanned once first to
learn its index variables (initialised from ``threadIdx``-style arithmetic) and its launch
variables (used inside ``<<<...>>>``), since both decide what later nodes mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from cuset_core.analysis import categories as cat
from cuset_core.analysis.categories import Category

_ARITHMETIC_OPS = frozenset({"+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"})
_COMPARISON_OPS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_LOGICAL_OPS = frozenset({"&&", "||", "and", "or"})
_ARITHMETIC_NODES = frozenset({"binary_expression", "parenthesized_expression", "unary_expression", "cast_expression"})
_INDEX_EXPRESSIONS = _ARITHMETIC_NODES | {"field_expression"}
_CONDITION_OWNERS = frozenset(
    {"if_statement", "while_statement", "do_statement", "for_statement", "conditional_expression"}
)
_HEADER_KINDS = MappingProxyType(
    {
        "if_statement": "if_header",
        "while_statement": "loop_header",
        "do_statement": "loop_header",
        "for_statement": "loop_header",
        "for_range_loop": "loop_header",
        "switch_statement": "switch_header",
    }
)
_BODY_FIELDS = ("body", "consequence", "alternative")
_UNIT_KINDS = MappingProxyType(
    {
        "declaration": "declaration",
        "field_declaration": "declaration",
        "expression_statement": "statement",
        "return_statement": "statement",
    }
)
_SCOPE_ENDS = frozenset({"compound_statement", "translation_unit", "declaration_list", "field_declaration_list"})


@lru_cache(maxsize=1)
def cuda_language() -> Language:
    """The tree-sitter-cuda grammar (immutable, loaded once)."""
    return Language(tree_sitter_cuda.language())


def new_parser() -> Parser:
    """A parser for CUDA/C++ sources; cheap, create one per analysis."""
    return Parser(cuda_language())


@dataclass(frozen=True)
class Finding:
    """A sensitive span and its enclosing unit, as half-open character offsets in the source."""

    start: int
    end: int
    category: Category
    unit_start: int
    unit_end: int
    unit_kind: str


@dataclass(frozen=True)
class SourceScan:
    """All findings of one source, and how much of it parsed."""

    findings: tuple[Finding, ...]
    chars: int
    unparsed_chars: int  # characters inside ERROR nodes or nodes completed with MISSING tokens


@dataclass(frozen=True)
class _Scope:
    """What a function body's names mean: index variables and launch-configuration variables."""

    index_vars: frozenset[str] = frozenset()
    launch_vars: frozenset[str] = frozenset()


def scan_source(source: str, parser: Parser, binding_names: frozenset[str] = frozenset()) -> SourceScan:
    """Find the sensitive spans of one CUDA/C++ source; never raises on broken code.

    ``binding_names`` are the functions the extension exports to Python (``functions=[...]``):
    where the source defines or declares one, its name is a binding span, since a name that
    differs between the definition, the declaration and the list breaks the build.
    """
    data = source.encode("utf-8")
    tree = parser.parse(data)
    scanner = _Scanner(data, binding_names)
    scanner.walk(tree.root_node)
    unparsed = _unparsed_ranges(tree.root_node) if tree.root_node.has_error else []
    to_char = _char_index(source, data)
    findings = tuple(
        Finding(to_char(s), to_char(e), category, to_char(us), to_char(ue), kind)
        for s, e, category, us, ue, kind in scanner.found
    )
    unparsed_chars = sum(to_char(e) - to_char(s) for s, e in unparsed)
    return SourceScan(findings, len(source), unparsed_chars)


def pybind_exports(source: str, parser: Parser) -> frozenset[str]:
    """Names of the functions a ``PYBIND11_MODULE`` exports: the ``&function`` of each
    ``m.def("name", &function, ...)`` (the binding list of a ``.cu`` answer)."""
    if "PYBIND11_MODULE" not in source:
        return frozenset()
    data = source.encode("utf-8")
    names = set()
    stack = [parser.parse(data).root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        function = node.child_by_field_name("function") if node.type == "call_expression" else None
        field = function.child_by_field_name("field") if function is not None else None
        if field is None or data[field.start_byte : field.end_byte] != b"def":
            continue
        arguments = node.child_by_field_name("arguments")
        target = arguments.named_children[1] if arguments is not None and arguments.named_child_count > 1 else None
        if target is not None and target.type == "pointer_expression":
            target = target.child_by_field_name("argument")
        if target is not None and target.type == "identifier":
            names.add(data[target.start_byte : target.end_byte].decode("utf-8", errors="replace"))
    return frozenset(names)


class _Scanner:
    """One walk over a parse tree, collecting ``(start, end, category, unit...)`` in bytes."""

    def __init__(self, data: bytes, binding_names: frozenset[str] = frozenset()):
        self.data = data
        self.binding_names = binding_names
        self.found: list[tuple[int, int, Category, int, int, str]] = []
        self.claimed: set[int] = set()  # node ids already inside an emitted span

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")

    def emit(self, node: Node, category: Category, start: int | None = None, end: int | None = None) -> None:
        unit_start, unit_end, kind = _unit(node)
        start = node.start_byte if start is None else start
        end = node.end_byte if end is None else end
        self.found.append((start, end, category, min(unit_start, start), max(unit_end, end), kind))

    def walk(self, root: Node) -> None:
        top = _Scope()
        stack: list[tuple[Node, _Scope]] = [(root, top)]
        while stack:
            node, scope = stack.pop()
            # A truncated function parses as a top-level ERROR node: a scope of its own then.
            if node.type == "function_definition" or (node.is_error and scope is top):
                scope = self.scope_of(node)
            if node.id in self.claimed or self.visit(node, scope):
                continue
            stack.extend((child, scope) for child in reversed(node.children))

    def visit(self, node: Node, scope: _Scope) -> bool:
        """Emit what ``node`` holds; True when its subtree is done (not to be walked)."""
        kind = node.type
        if kind in cat.QUALIFIER_NODES:
            self.emit(node, Category.QUALIFIER)
            return True
        if kind == "identifier":
            word = self.text(node)
            if word in cat.QUALIFIER_WORDS:
                self.emit(node, Category.QUALIFIER)
            elif word == cat.WARP_SIZE or word in scope.index_vars:
                self.emit(node, Category.INDEXING)
            return True
        if kind == "type_qualifier":
            word = self.text(node)
            if word == cat.RESTRICT or word in cat.SPACE_QUALIFIERS:
                self.emit(node, Category.MEMORY_SPACE)
            return True
        if kind in ("declaration", "field_declaration"):
            return self.visit_declaration(node, scope)
        if kind == "assignment_expression":
            left = node.child_by_field_name("left")
            if left is not None and self.text(left) in scope.launch_vars:
                self.emit(node, Category.LAUNCH)
                return True
            return False
        if kind == "kernel_call_syntax":
            self.emit(node, Category.LAUNCH)
            return True
        if kind == "call_expression":
            return self.visit_call(node)
        if kind == "qualified_identifier":
            name = self.text(node)
            if name in cat.TENSOR_TYPES or "cuda::" in name:
                self.emit(node, Category.BINDING)
                return True
            return False
        if kind == "function_declarator":
            declarator = node.child_by_field_name("declarator")
            if declarator is not None and self.text(declarator) in cat.MODULE_MACROS:
                self.emit(node, Category.BINDING)
                return True
            if (
                declarator is not None
                and declarator.type == "identifier"
                and self.text(declarator) in self.binding_names
            ):
                self.emit(declarator, Category.BINDING)
            return False
        if kind == "number_literal":
            if cat.is_full_mask(self.text(node)):
                self.emit(node, Category.WARP)
            return True
        if kind in _INDEX_EXPRESSIONS and self.is_index(node, scope.index_vars):
            self.emit(node, Category.INDEXING)
            return True
        if kind in _CONDITION_OWNERS or (kind == "condition_clause" and _is_orphan(node)):
            owned = node if kind == "condition_clause" else node.child_by_field_name("condition")
            condition = _unwrap(owned) if owned is not None else None
            if condition is not None and self.is_guard(condition, scope):
                self.emit(condition, Category.BOUNDS_GUARD)
                self.claimed.add(condition.id)
        return False

    def visit_declaration(self, node: Node, scope: _Scope) -> bool:
        """``__shared__``/``__constant__`` and launch-configuration declarations are one span."""
        end = _end_before_semicolon(node)
        for child in node.children:
            if child.type == "type_qualifier" and self.text(child) in cat.SPACE_QUALIFIERS:
                follower = node.next_named_sibling
                if node.children[-1].is_missing and follower is not None and follower.type == "declaration":
                    # `extern __shared__ __align__(8) unsigned char s[];`: the grammar does not know
                    # __align__ and splits the declaration in two; the span covers both halves.
                    end = _end_before_semicolon(follower)
                    self.claimed.add(follower.id)
                self.emit(node, Category.MEMORY_SPACE, end=end)
                return True
        type_node = node.child_by_field_name("type")
        is_dim3 = type_node is not None and self.text(type_node) == cat.LAUNCH_TYPE
        if is_dim3 or any(name in scope.launch_vars for name in self.declared_names(node)):
            self.emit(node, Category.LAUNCH, end=end)
            return True
        return False

    def visit_call(self, node: Node) -> bool:
        """Sensitive calls are one span; ``AT_DISPATCH_*`` only by name (its lambda is code)."""
        function = node.child_by_field_name("function")
        if function is None:
            return False
        if function.type == "field_expression":
            return self.visit_method_call(node, function)
        name = self.callee_name(function)
        if name is None:
            return False
        category = cat.call_category(name)
        if category is not None:
            self.emit(node, category)
            return True
        if cat.is_dispatch_macro(name):
            self.emit(function, Category.BINDING)
            self.claimed.add(function.id)
        return False

    def visit_method_call(self, node: Node, function: Node) -> bool:
        """``t.data_ptr<T>()`` (from the method name on) and pybind11's ``m.def(...)``."""
        field = function.child_by_field_name("field")
        if field is None:
            return False
        method = field.child_by_field_name("name") if field.type == "template_method" else field
        name = self.text(method) if method is not None else ""
        if name in cat.DATA_POINTER_METHODS:
            self.emit(node, Category.BINDING, start=field.start_byte)
            return True
        if name == "def" and node.parent is not None and node.parent.type == "expression_statement":
            self.emit(node, Category.BINDING)
            return True
        return False

    def callee_name(self, function: Node) -> str | None:
        """The called name without namespaces or template arguments."""
        while function.type in ("qualified_identifier", "template_function"):
            inner = function.child_by_field_name("name")
            if inner is None:
                return None
            function = inner
        return self.text(function) if function.type == "identifier" else None

    def is_index(self, node: Node, index_vars: frozenset[str] | set[str]) -> bool:
        """True for thread-index built-ins, index variables and arithmetic built on them."""
        kind = node.type
        if kind == "identifier":
            word = self.text(node)
            return word == cat.WARP_SIZE or word in index_vars
        if kind == "field_expression":
            argument = node.child_by_field_name("argument")
            return (
                argument is not None and argument.type == "identifier" and (self.text(argument) in cat.INDEX_BUILTINS)
            )
        if kind == "binary_expression":
            operator = node.child_by_field_name("operator")
            if operator is None or operator.type not in _ARITHMETIC_OPS:
                return False
            return any(self.is_index(child, index_vars) for child in _operands(node))
        if kind in ("parenthesized_expression", "unary_expression", "cast_expression"):
            inner = node.child_by_field_name("value") or node.child_by_field_name("argument")
            children = [inner] if inner is not None else node.named_children
            return any(self.is_index(child, index_vars) for child in children)
        return False

    def is_guard(self, node: Node, scope: _Scope) -> bool:
        """A condition with a comparison of index arithmetic (inside ``&&``, ``||``, ``!``)."""
        node = _unwrap(node)
        if node.type == "unary_expression":
            argument = node.child_by_field_name("argument")
            return argument is not None and self.is_guard(argument, scope)
        if node.type != "binary_expression":
            return False
        operator = node.child_by_field_name("operator")
        op = operator.type if operator is not None else ""
        if op in _LOGICAL_OPS:
            return any(self.is_guard(child, scope) for child in _operands(node))
        if op in _COMPARISON_OPS:
            return any(self.is_index(child, scope.index_vars) for child in _operands(node))
        return False

    def declared_names(self, declaration: Node) -> list[str]:
        """Names a declaration introduces (``int a = 1, b;`` -> ``["a", "b"]``)."""
        names = []
        for declarator in declaration.children_by_field_name("declarator"):
            while declarator.type in ("init_declarator", "function_declarator"):
                inner = declarator.child_by_field_name("declarator")
                if inner is None:
                    break
                declarator = inner
            if declarator.type == "identifier":
                names.append(self.text(declarator))
        return names

    def scope_of(self, function: Node) -> _Scope:
        """Index and launch variables of a function body, learnt in document order."""
        index_vars: set[str] = set()
        launch_vars: set[str] = set()
        dim3_args: dict[str, set[str]] = {}
        stack = [function]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind in ("init_declarator", "assignment_expression"):
                target = node.child_by_field_name("declarator" if kind == "init_declarator" else "left")
                value = node.child_by_field_name("value" if kind == "init_declarator" else "right")
                if target is not None and value is not None and target.type == "identifier":
                    if self.is_index(value, index_vars):
                        index_vars.add(self.text(target))
            elif kind == "kernel_call_syntax":
                for child in node.named_children:
                    launch_vars.update(self.arithmetic_names(child))
            elif kind == "declaration":
                type_node = node.child_by_field_name("type")
                if type_node is not None and self.text(type_node) == cat.LAUNCH_TYPE:
                    for declarator in node.children_by_field_name("declarator"):
                        names = self.names_in(declarator)
                        if names:
                            dim3_args.setdefault(names[0], set()).update(names[1:])
            stack.extend(reversed(node.children))
        for name in list(launch_vars):
            launch_vars.update(dim3_args.get(name, ()))
        return _Scope(frozenset(index_vars), frozenset(launch_vars))

    def arithmetic_names(self, node: Node) -> list[str]:
        """Identifiers an expression reads through arithmetic only (not via calls or members)."""
        if node.type == "identifier":
            return [self.text(node)]
        if node.type in _ARITHMETIC_NODES:
            return [name for child in node.named_children for name in self.arithmetic_names(child)]
        return []

    def names_in(self, node: Node) -> list[str]:
        """Every identifier (and type-like identifier) in a subtree, in document order."""
        names = []
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type in ("identifier", "type_identifier"):
                names.append(self.text(current))
            stack.extend(reversed(current.children))
        return names


def _operands(node: Node) -> list[Node]:
    return [child for child in (node.child_by_field_name("left"), node.child_by_field_name("right")) if child]


def _unwrap(node: Node) -> Node:
    """The expression inside ``condition_clause`` and redundant parentheses."""
    while node.type in ("condition_clause", "parenthesized_expression"):
        inner = node.child_by_field_name("value")
        if inner is None:
            named = node.named_children
            inner = named[0] if len(named) == 1 else None
        if inner is None:
            return node
        node = inner
    return node


def _end_before_semicolon(node: Node) -> int:
    children = node.children
    if children and children[-1].type == ";" and len(children) > 1:
        return children[-2].end_byte
    return node.end_byte


def _is_body(parent: Node, child: Node) -> bool:
    return any(
        (body := parent.child_by_field_name(field)) is not None and body.id == child.id for field in _BODY_FIELDS
    )


def _unit(node: Node) -> tuple[int, int, str]:
    """The smallest unit holding ``node``: a statement, a declaration, or the header of the
    loop/if/switch or the signature of the function it sits in (bodies excluded); byte range."""
    candidate: Node | None = None
    child: Node | None = None
    current: Node | None = node
    while current is not None:
        kind = current.type
        if child is not None:
            if kind in _HEADER_KINDS and not _is_body(current, child):
                return _header(current)
            if kind == "function_definition" and not _is_body(current, child):
                return _signature(current)
            if kind in _SCOPE_ENDS:
                break
        if candidate is None and kind in _UNIT_KINDS:
            candidate = current
        if kind == "condition_clause" and _is_orphan(current):
            return _orphan_header(current)
        child, current = current, current.parent
    if candidate is None:
        return node.start_byte, node.end_byte, "expression"
    kind = _UNIT_KINDS[candidate.type]
    if candidate.type == "expression_statement" and _is_launch(candidate):
        kind = "launch"
    return candidate.start_byte, candidate.end_byte, kind


def _is_orphan(clause: Node) -> bool:
    """A condition clause that error recovery separated from its ``if``/``while``."""
    return clause.parent is not None and clause.parent.is_error


def _orphan_header(clause: Node) -> tuple[int, int, str]:
    keyword = clause.prev_sibling
    if keyword is not None and keyword.type in ("if", "while"):
        kind = "if_header" if keyword.type == "if" else "loop_header"
        return keyword.start_byte, clause.end_byte, kind
    return clause.start_byte, clause.end_byte, "expression"


def _is_launch(statement: Node) -> bool:
    call = statement.named_children[0] if statement.named_child_count else None
    return (
        call is not None
        and call.type == "call_expression"
        and any(child.type == "kernel_call_syntax" for child in call.children)
    )


def _header(owner: Node) -> tuple[int, int, str]:
    """The header of a loop/if/switch: from its keyword to the end of its condition."""
    kind = _HEADER_KINDS[owner.type]
    body = owner.child_by_field_name("body")
    if owner.type == "do_statement":
        keyword = next((c for c in owner.children if c.type == "while"), owner)
        condition = owner.child_by_field_name("condition")
        return keyword.start_byte, (condition or owner).end_byte, kind
    if owner.type in ("for_statement", "for_range_loop") and body is not None and body.prev_sibling:
        return owner.start_byte, body.prev_sibling.end_byte, kind
    condition = owner.child_by_field_name("condition")
    end = condition.end_byte if condition is not None else owner.end_byte
    return owner.start_byte, end, kind


def _signature(function: Node) -> tuple[int, int, str]:
    declarator = function.child_by_field_name("declarator")
    end = declarator.end_byte if declarator is not None else function.end_byte
    is_kernel = any(child.type == "__global__" for child in function.children)
    return function.start_byte, end, "kernel_signature" if is_kernel else "function_signature"


def _unparsed_ranges(root: Node) -> list[tuple[int, int]]:
    """Merged byte ranges of ERROR nodes and of the nodes holding a MISSING token."""
    ranges = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error:
            ranges.append((node.start_byte, node.end_byte))
            continue
        if node.is_missing and node.parent is not None:
            ranges.append((node.parent.start_byte, node.parent.end_byte))
        stack.extend(child for child in node.children if child.has_error or child.is_missing)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _char_index(source: str, data: bytes):
    """A function from UTF-8 byte offset to character offset in ``source``."""
    if len(data) == len(source):
        return lambda offset: offset
    table = [0] * (len(data) + 1)
    position = 0
    for index, char in enumerate(source):
        width = len(char.encode("utf-8"))
        for k in range(width):
            table[position + k] = index
        position += width
    table[len(data)] = len(source)
    return table.__getitem__
