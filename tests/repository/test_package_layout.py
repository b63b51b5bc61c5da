"""The package's folders keep the architecture the code map describes: read
from the source's module-level imports, so a change that breaks a rule
fails here, not in review."""
import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]


def module_name(path, root):
    """The dotted module name of ``path``: under ``root``'s parent for a
    package, under ``root`` for a folder of scripts (``bench/``, run with
    itself on the path)."""
    top = root.parent if (root / "__init__.py").exists() else root
    parts = list(path.relative_to(top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root):
    """{dotted name: path} of every module under ``root``."""
    return {module_name(path, root): path for path in root.rglob("*.py")}


def imported(path, name, known):
    """The modules of ``known`` that ``path`` (module ``name``) imports at
    module level: a module imported from a package counts as the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if whole in known else base)
    return {module for module in found if module in known}


def graph(root):
    """{module: modules it imports at module level} of the tree at ``root``."""
    known = modules(root)
    return {name: imported(path, name, known) for name, path in known.items()}


def cycle(edges):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(module, trail):
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                return trail[trail.index(target):] + [target]
            if target not in state:
                found = visit(target, trail + [target])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def outside_package(edges, module):
    """Drop the edges of a package's ``__init__`` to its own submodules and
    back: a package re-exporting a submodule's names is no circle."""
    return {target for target in edges[module]
            if not (target.startswith(module + ".") or module.startswith(target + "."))}


def test_no_import_circle_in_the_package_or_the_benchmark():
    for root in (REPO / "plantstore", REPO / "bench"):
        edges = graph(root)
        edges = {module: outside_package(edges, module) for module in edges}
        assert cycle(edges) is None, cycle(edges)


def test_the_engine_imports_nothing_from_sending_or_subscriptions():
    edges = graph(REPO / "plantstore")
    for module, targets in edges.items():
        if module.startswith("plantstore.webhooks.engine"):
            leaks = {target for target in targets
                     if target.startswith(("plantstore.webhooks.sending",
                                           "plantstore.webhooks.subscriptions"))}
            assert not leaks, (module, leaks)


def test_plants_import_only_the_webhooks_face():
    edges = graph(REPO / "plantstore")
    for module, targets in edges.items():
        if module.startswith("plantstore.plants"):
            inner = {target for target in targets
                     if target.startswith("plantstore.webhooks.")}
            assert not inner, (module, inner)


def test_backend_branches_live_only_in_the_database_package_and_the_stores():
    allowed = ("plantstore/db/", "plantstore/webhooks/engine/store/")
    for path in (REPO / "plantstore").rglob("*.py"):
        relative = path.relative_to(REPO).as_posix()
        names = {node.id for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Name)}
        names |= {alias.asname or alias.name for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.ImportFrom) for alias in node.names}
        if "is_sqlite" in names:
            assert relative.startswith(allowed), relative


def test_the_graph_holds_the_imports_it_judges():
    assert "plantstore.db.clock" in graph(REPO / "plantstore")["plantstore.webhooks.engine.queue"]
    assert "servers" in graph(REPO / "bench")["fairness"]


def test_a_circle_is_found_when_there_is_one(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from . import b\n")
    (root / "b.py").write_text("from .a import thing\n")
    assert cycle(graph(root)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_subscription_rows_are_written_only_through_the_stores():
    writes = {"create", "insert", "insert_many", "update", "delete", "replace"}
    allowed = ("plantstore/webhooks/subscriptions/store.py", "plantstore/webhooks/engine/store/",
               "plantstore/db/migrations/")
    writers = set()
    for path in (REPO / "plantstore").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in writes \
                    and isinstance(node.value, ast.Name) and node.value.id == "Subscription":
                writers.add(path.relative_to(REPO).as_posix())
    assert "plantstore/webhooks/subscriptions/store.py" in writers
    assert all(writer.startswith(allowed) for writer in writers), writers
