"""The layers hold: storage knowledge stays in ``llama_memory/storage/``, and the
package's modules import each other without cycles.

Outside ``storage/`` no module imports a backend (``sqlite3``, ``chromadb``, ``psycopg``,
the ``storage.sqlite``, ``storage.postgres`` or ``storage.chroma`` modules) or holds SQL,
except the modules of :data:`ALLOWED`, each for the reason given there. The modules that
open stores (construction, admin, the command line, copies) ask the backend registry
(``storage/registry.py``) and never name a backend: a new backend is a package and a
registry entry, not an edit of theirs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llama_memory"

#: Backend modules: only ``llama_memory/storage/`` and the allowed modules import them.
BACKENDS = re.compile(r"^(sqlite3|chromadb|psycopg\w*|llama_memory\.storage\.(sqlite|postgres|chroma))(\.|$)")
#: SQL statements as they are written in this code base (keywords in capitals).
SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
    r"CREATE\s+(TABLE|(UNIQUE\s+)?INDEX|VIRTUAL\s+TABLE|TRIGGER)|PRAGMA\s+\w+)",
    re.DOTALL,
)

#: Modules outside storage/ that may import a backend (B) or hold SQL (S), and why.
ALLOWED: dict[str, tuple[str, str]] = {}


def _modules() -> dict[str, Path]:
    return {
        ".".join(("llama_memory", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _imports(name: str, path: Path, *, runtime_only: bool) -> set[str]:
    """The absolute names a module imports (relative imports resolved), also inside
    functions; with ``runtime_only``, not those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if runtime_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = package
                for _ in range(child.level - 1):
                    base = base.rpartition(".")[0]
                module = child.module or ""
                target = (f"{base}.{module}" if module else base) if child.level else module
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in child.names)
            visit(child)

    visit(tree)
    return found


def _strings(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings (prose may name SQL)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _allowed(relative: str, kind: str) -> bool:
    return any(
        (relative == key or relative.startswith(key + "/") or relative == key + ".py") and kind in kinds
        for key, (kinds, _) in ALLOWED.items()
    )


def test_no_module_outside_storage_imports_a_backend_or_holds_sql() -> None:
    offences = []
    for name, path in _modules().items():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("storage/"):
            continue
        backends = sorted(i for i in _imports(name, path, runtime_only=False) if BACKENDS.match(i))
        if backends and not _allowed(relative, "B"):
            offences.append(f"{relative} imports {backends}")
        sql = [text for text in _strings(path) if SQL.search(text)]
        if sql and not _allowed(relative, "S"):
            offences.append(f"{relative} holds SQL: {sql[0][:60]!r}")
    assert offences == [], "storage knowledge outside llama_memory/storage/:\n" + "\n".join(offences)


def test_the_allow_list_names_only_modules_that_need_it() -> None:
    """An entry whose module no longer imports a backend or holds SQL goes from the list."""
    modules = _modules()
    for key, (kinds, why) in ALLOWED.items():
        paths = [p for p in modules.values() if _allowed(p.relative_to(PACKAGE).as_posix(), kinds[0])
                 and (p.relative_to(PACKAGE).as_posix() in (key, key + ".py")
                      or p.relative_to(PACKAGE).as_posix().startswith(key + "/"))]
        assert paths, f"ALLOWED names {key}, which does not exist"
        names = {n for n, p in modules.items() if p in paths}
        imports_backend = any(
            BACKENDS.match(i) for n in names for i in _imports(n, modules[n], runtime_only=False)
        )
        holds_sql = any(SQL.search(text) for p in paths for text in _strings(p))
        needed = ("B" in kinds and imports_backend) or ("S" in kinds and holds_sql)
        assert needed, f"{key} no longer needs its place in ALLOWED ({why}): remove it"


#: The modules that open stores or choose where data goes: they ask the registry
#: (a name ending in "/" is a package: each of its modules).
OPENERS = (
    "memory/wiring.py",
    "admin/memory_admin.py",
    "admin/transfer.py",
    "admin/cli/",
    "admin/copying.py",
    "write/formation/worker_process.py",
    "blocks.py",
    "admin/mcp_server.py",
)


def _opener_modules() -> dict[str, Path]:
    """The modules :data:`OPENERS` names, by their dotted name."""
    return {
        name: path
        for name, path in _modules().items()
        if any(
            path.relative_to(PACKAGE).as_posix() == entry
            or (entry.endswith("/") and path.relative_to(PACKAGE).as_posix().startswith(entry))
            for entry in OPENERS
        )
    }
#: A backend's name, as an identifier or a bare string (a URL scheme, a dict key).
BACKEND_NAME = re.compile(r"postgres|sqlite|pgvector|psycopg|SQLiteStore", re.IGNORECASE)
#: Keyword arguments whose strings are prose for people (the command line's help).
PROSE_KEYWORDS = {"help", "metavar", "description", "epilog"}


def _backend_names(path: Path) -> list[str]:
    """Where a module names a backend in its code: identifiers (names, attributes,
    functions, arguments, imports) and strings without spaces (a scheme to compare
    with, a key to look up), not prose (messages, docstrings, help text)."""
    tree = ast.parse(path.read_text())
    prose = {
        id(keyword.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg in PROSE_KEYWORDS
    }
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            names = [node.value] if not re.search(r"\s", node.value) else []
        found += [f"line {node.lineno}: {name}" for name in names if BACKEND_NAME.search(name)]  # type: ignore[attr-defined]
    return found


def test_the_modules_that_open_stores_never_name_a_backend() -> None:
    """Construction, the admin, the command line and copies choose a backend through
    the registry only: no backend import, no ``is_postgres_url``, no
    ``isinstance(store, SQLiteStore)``, no ``"postgres" in sizes``."""
    openers = _opener_modules()
    assert len(openers) >= len(OPENERS), f"OPENERS names modules that do not exist: {OPENERS}"
    offences = {}
    for name, path in openers.items():
        imports = sorted(i for i in _imports(name, path, runtime_only=False) if BACKENDS.match(i))
        named = _backend_names(path)
        if imports or named:
            offences[path.relative_to(PACKAGE).as_posix()] = imports + named
    assert offences == {}, f"modules that open stores name a backend (ask storage.registry): {offences}"


def test_importing_the_registry_loads_no_backend_driver() -> None:
    """The PostgreSQL extra stays optional: the registry (and choosing a directory's
    backend) imports no database driver; a server's bundle loads when one is given."""
    import subprocess
    import sys

    code = (
        "import sys; from llama_memory.storage.registry import backend_for; "
        "assert backend_for('./memory').name == 'SQLite'; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool') "
        "or m.startswith('llama_memory.storage.postgres')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


#: Cycles known and left, each with why (a cycle is a ring of modules that need each
#: other, a function-level import and an import for annotations under ``TYPE_CHECKING``
#: included: a type a lower module needs of a higher one is a Protocol of its own).
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def _import_graph() -> dict[str, set[str]]:
    """Which modules of the package each one imports: at run time (at the top or in a
    function) or for annotations (under ``if TYPE_CHECKING:``)."""
    modules = _modules()
    graph = {
        name: {i for i in _imports(name, path, runtime_only=False) if i in modules and i != name}
        for name, path in modules.items()
    }
    # A submodule imports its parent package first by Python's rules: not a cycle of ours.
    for name, targets in graph.items():
        targets -= {p for p in targets if name.startswith(p + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every simple cycle (of up to 6 modules), each from its smallest name."""
    found: set[tuple[str, ...]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for target in graph[node]:
            if target == start:
                at = path.index(min(path))
                found.add(tuple(path[at:] + path[:at]))
            elif target not in path and target > start and len(path) < 6:
                walk(start, target, [*path, target])

    for name in graph:
        walk(name, name, [name])
    return found


def test_the_package_has_no_import_cycles() -> None:
    """Not at run time, and not counting the imports made for annotations either."""
    cycles = _cycles(_import_graph()) - KNOWN_CYCLES
    assert cycles == set(), "import cycles:\n" + "\n".join(" -> ".join(c) for c in sorted(cycles))


def test_storage_depends_on_nothing_above_it() -> None:
    """Storage is the bottom layer: of the package, it imports only itself and the
    leaf modules of plain domain types, errors and text helpers."""
    # (asyncbridge: the greenlet bridge of async calls, importing nothing of the package;
    # distribution: the name install hints give, likewise.)
    leaves = {
        "llama_memory.core.types", "llama_memory.core.errors", "llama_memory.core.text", "llama_memory.core.asyncbridge",
        "llama_memory.core.distribution",
    }
    graph = _import_graph()
    above = {
        name: sorted(t for t in targets if not t.startswith("llama_memory.storage") and t not in leaves)
        for name, targets in graph.items()
        if name.startswith("llama_memory.storage")
    }
    assert {name: t for name, t in above.items() if t} == {}
    composing = [name for name in graph if name == "llama_memory.read.compose" or name.startswith("llama_memory.read.compose.")]
    assert len(composing) > 1  # the package and its steps
    uses_storage = sorted(t for name in composing for t in graph[name] if t.startswith("llama_memory.storage"))
    assert uses_storage == []  # composing a block needs no storage (its text helper is in text.py)


#: The layers, from the top down (docs/architecture.md, "The layers"): a module imports
#: modules of its own layer and of the layers below it. ``read/`` and ``write/``, the two
#: pipelines, are one layer; the root package and its public modules are the top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "blocks", "chat_engines", "testing", "__main__"),
    ("admin",),
    ("memory",),
    ("read", "write"),
    ("sources",),
    ("retrieval",),
    ("embeddings",),
    ("storage",),
    ("core",),
)

#: Imports that go up a layer, each with why: (the importing module or package, the
#: module imported).
UPWARD: dict[tuple[str, str], str] = {
    ("llama_memory.read.pipeline", "llama_memory.memory.runtime"): "the pipelines work on the memory's Runtime",
    ("llama_memory.write.pipeline", "llama_memory.memory.runtime"): "the pipelines work on the memory's Runtime",
    ("llama_memory.write.formation.passes", "llama_memory.memory.runtime"): "a pass is queued from the Runtime",
    ("llama_memory.write.buffer", "llama_memory.memory"): "the default sizes, a leaf that imports nothing",
    ("llama_memory.write.formation.worker_process", "llama_memory.memory.composable"):
        "the `llama-memory worker` process opens a memory per job",
    ("llama_memory.sources.profile.source", "llama_memory.write.formation"):
        "extract(): a pass run by hand, imported inside the method",
    ("llama_memory.sources.triples.source", "llama_memory.write.formation"):
        "extract(): a pass run by hand, imported inside the method",
}


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _upward_imports() -> set[tuple[str, str]]:
    """Every (module, imported module) of the package where the second is a layer up."""
    return {
        (name, target)
        for name, targets in _import_graph().items()
        for target in targets
        if _layer(target) < _layer(name)
    }


def _allowed_upward(name: str, target: str) -> bool:
    return any(target == up and (name == low or name.startswith(low + ".")) for low, up in UPWARD)


def test_each_layer_imports_only_itself_and_the_layers_below() -> None:
    every = {name.split(".")[1] for name in _modules() if "." in name}
    assert every <= {top for names in LAYERS for top in names}, "a folder missing from LAYERS"
    offences = sorted(f"{name} -> {target}" for name, target in _upward_imports() if not _allowed_upward(name, target))
    assert offences == [], "imports up a layer (move the code, or name it in UPWARD with why):\n" + "\n".join(offences)


def test_every_upward_import_allowed_is_made() -> None:
    """An entry of :data:`UPWARD` no module makes any more goes from the list."""
    made = _upward_imports()
    unused = [(low, up) for low, up in UPWARD
              if not any(t == up and (n == low or n.startswith(low + ".")) for n, t in made)]
    assert unused == [], f"UPWARD names imports no module makes: {unused}"
