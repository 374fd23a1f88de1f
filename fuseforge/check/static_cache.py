"""Static rules for cached outputs: containers keyed by tensor identity, and forward returning state
that a method stored across calls (`return self._out` after `self._out = ...` outside __init__)."""

from __future__ import annotations

import ast

from fuseforge.check.static_rules import IDENTITY_CALLS, PASS_THROUGH


class CacheRules:
    """Mixin of the static scanner (needs self.tree, self.parents, self.defined, self.flag)."""

    def _identity_key(self, node: ast.AST) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                f = n.func
                if (isinstance(f, ast.Attribute) and f.attr in IDENTITY_CALLS) or \
                        (isinstance(f, ast.Name) and f.id in ("id", "hash")):
                    return True
        return False

    def _Subscript(self, node: ast.Subscript) -> None:
        if self._identity_key(node.slice):
            self.flag("output_cache", node, "indexes a container by tensor identity (data_ptr/id/hash)")

    def _Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and self._identity_key(node.left):
            self.flag("output_cache", node, "looks up a container by tensor identity (data_ptr/id/hash)")

    def _Dict(self, node: ast.Dict) -> None:
        if any(k is not None and self._identity_key(k) for k in node.keys):
            self.flag("output_cache", node, "a dict keyed by tensor identity (data_ptr/id/hash)")

    # ---- returning state that forward stored
    def _enclosing_function(self, node: ast.AST):
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent = self.parents.get(id(parent))
        return parent

    def _stored_name(self, node: ast.AST) -> str | None:
        """'self.x' / 'NAME' for `self.x`, `self.x[k]`, `NAME[k]`, looking through .clone() and the like."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PASS_THROUGH:
            node = node.func.value
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return f"self.{node.attr}"
        if isinstance(node, ast.Name) and node.id in self.defined:
            return node.id
        return None

    def _output_functions(self) -> set[str]:
        """'forward' and the functions whose result forward returns directly (`return self._impl(x)`)."""
        names = {"forward"}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and \
                    getattr(self._enclosing_function(node), "name", None) == "forward":
                func = node.value.func
                names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        return names

    def _returns_of_stored_state(self) -> None:
        stored: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                function = self._enclosing_function(node)
                if function is None or function.name == "__init__":
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    name = self._stored_name(t)
                    if name and (name.startswith("self.") or isinstance(t, ast.Subscript)):
                        stored.add(name)
        producers = self._output_functions()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Return) and node.value is not None and \
                    getattr(self._enclosing_function(node), "name", None) in producers:
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for value in values:
                    name = self._stored_name(value)
                    if name in stored:
                        self.flag("output_cache", node, f"returns {name}, which a method stores across calls")
