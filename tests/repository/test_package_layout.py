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


def test_the_engine_and_the_database_know_no_flask_app():
    """Below the web layer nothing imports Flask or wires itself into an app
    (``init_app``): ``create_app`` registers what they offer."""
    for folder in ("db", "webhooks/engine"):
        for path in (REPO / "plantstore" / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            imports = {alias.name.split(".")[0] for node in ast.walk(tree)
                       if isinstance(node, ast.Import) for alias in node.names}
            imports |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and not node.level}
            functions = {node.name for node in ast.walk(tree)
                         if isinstance(node, ast.FunctionDef)}
            assert "flask" not in imports and "init_app" not in functions, path


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


LAYERS = (
    ("plantstore.encryption",),
    ("plantstore.settings",),
    ("plantstore.observability",),
    ("plantstore.db",),
    ("plantstore.process",),
    ("plantstore.webhooks.engine",),
    ("plantstore.web",),
    ("plantstore.webhooks.config", "plantstore.webhooks.receivers"),
    ("plantstore.webhooks.sending", "plantstore.webhooks.subscriptions"),
    ("plantstore.webhooks",),
    ("plantstore.plants",),
    ("plantstore.housekeeping",),
    ("plantstore.portal",),
    ("plantstore.server",),
    ("plantstore.cli",),
    ("plantstore",),
)
"""The layers of the package, lowest first: a module imports (at module
level) only from its own package, from lower layers, never from a higher one
or from a peer on its own layer (``sending`` and ``subscriptions`` import
nothing of each other: what both need is ``webhooks/receivers/``). The
webhooks' face (``webhooks/__init__.py``, ``config.py``) sits above its
parts; ``create_app`` (``plantstore/__init__.py``) on top of everything."""


def package_of(module):
    """The longest package of ``LAYERS`` that holds ``module``: (layer, package)."""
    best = None
    for layer, packages in enumerate(LAYERS):
        for package in packages:
            if (module == package or module.startswith(package + ".")) \
                    and (best is None or len(package) > len(best[1])):
                best = (layer, package)
    return best


def test_every_module_has_a_layer():
    for module in graph(REPO / "plantstore"):
        assert package_of(module) is not None, module


def test_layers_look_down_only_package_to_package():
    edges = graph(REPO / "plantstore")
    wrong = set()
    for module, targets in edges.items():
        layer, package = package_of(module)
        for target in targets:
            target_layer, target_package = package_of(target)
            if target_package != package and target_layer >= layer:
                wrong.add((package, target_package, f"{module} imports {target}"))
    assert not wrong, sorted(wrong)


def test_a_package_importing_a_higher_layer_is_caught(tmp_path):
    edges = {"plantstore.db.x": {"plantstore.web.auth"},
             "plantstore.webhooks.sending.a": {"plantstore.webhooks.subscriptions.b"}}
    found = {(package_of(module)[1], package_of(target)[1]) for module, targets in edges.items()
             for target in targets if package_of(target)[0] >= package_of(module)[0]}
    assert found == {("plantstore.db", "plantstore.web"),
                     ("plantstore.webhooks.sending", "plantstore.webhooks.subscriptions")}


MOST_LINES = 300


def test_no_module_is_over_300_lines():
    long = {path.relative_to(REPO).as_posix()
            for path in (REPO / "plantstore").rglob("*.py")
            if len(path.read_text().splitlines()) > MOST_LINES}
    assert not long, long


def test_at_most_four_flat_modules_beside_the_folders():
    flat = sorted(path.name for path in (REPO / "plantstore").glob("*.py"))
    assert len(flat) <= 4, flat


def test_every_package_folder_has_its_tests_folder():
    """``tests/<folder>/`` beside every folder of the package (the numbered
    migrations are tested as the database's, in ``tests/db/``)."""
    missing = []
    for init in (REPO / "plantstore").rglob("__init__.py"):
        folder = init.parent.relative_to(REPO / "plantstore")
        if folder.parts and folder.as_posix() != "db/migrations" \
                and not any((REPO / "tests" / folder).rglob("test_*.py")):
            missing.append(folder.as_posix())
    assert not missing, missing


SQL_TEXT_MODULES = {"plantstore/db/__init__.py", "plantstore/db/clock.py",
                    "plantstore/db/erasure.py", "plantstore/db/faults.py",
                    "plantstore/db/runner.py", "plantstore/db/sqlite_turns.py",
                    "plantstore/db/named_sql.py", "plantstore/db/upgrade_lock.py"}
"""The database package's own plumbing, which runs SQL of its own (pragmas,
locks, the clock, the migrations' bookkeeping)."""


SQL_FILE_LOADERS = {"plantstore/plants/queries.py", "plantstore/web/auth.py"}
"""The hot paths whose peewee query costs more to build than to run, beside
the delivery stores (``webhooks/engine/store/``): the modules that run named
statements of a ``.sql`` file."""


def test_sql_text_is_named_statements_in_sql_files_and_crud_is_peewee():
    """The SQL rule of docs/development.md: SQL text is a named statement of a
    ``.sql`` file, loaded by ``db.named_sql.Queries`` (the one loader) in the
    module of the same name beside it, only by the delivery stores and the
    hot paths; everything else is peewee. So nothing outside ``db/`` and the
    migrations runs SQL text with ``execute_sql``."""
    loaders = set()
    for path in (REPO / "plantstore").rglob("*.py"):
        relative = path.relative_to(REPO).as_posix()
        text = path.read_text()
        if relative in SQL_TEXT_MODULES or relative.startswith("plantstore/db/migrations/"):
            continue
        assert "execute_sql" not in text, relative
        if "Queries(" in text:
            loaders.add(relative)
            assert relative in SQL_FILE_LOADERS \
                or relative.startswith("plantstore/webhooks/engine/store/"), relative
            assert f'"{path.stem}.sql"' in text, relative
    assert SQL_FILE_LOADERS <= loaders
    for sql_file in (REPO / "plantstore").rglob("*.sql"):
        relative = sql_file.relative_to(REPO).as_posix()
        if not relative.startswith("plantstore/db/migrations/functions/"):
            assert relative.removesuffix(".sql") + ".py" in loaders, relative


def test_there_is_one_sql_loader():
    """No second way to run SQL text: the loader is ``db.named_sql.Queries``."""
    for path in (REPO / "plantstore").rglob("*.py"):
        classes = {node.name for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.ClassDef)}
        if path.name != "named_sql.py":
            assert not classes & {"Statement", "Queries"}, path
