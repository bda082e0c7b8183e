"""Every Python snippet of README.md and docs/**/*.md runs, so the docs cannot drift from the code.

One test per fenced ``python`` block, named ``page:line`` of its opening fence. A page's
blocks run in order in one namespace, because they build on each other (profile.md's later
blocks use the ``profile`` and ``memory`` of its first); the test of a block first runs the
blocks above it that have not run yet, so ``-k "profile.md:75"`` works alone, and a block
after a failed one fails with "not run: <page:line> failed before it". Each page runs in its
own temporary working directory (``path="./memory"`` lands there), with its own event loop,
so top-level ``await agent.run(...)`` works as in a notebook
(``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``). Tracebacks point at the page's own lines.

Offline: OpenAI is the only thing replaced, since it is outside the machine (see
:mod:`doc_snippets`): ``OpenAI(...)`` is a scripted LLM fed by the page's ``llm`` markers,
``OpenAIEmbedding(...)`` a hashed-words embedding of the real dimension. A page that names
the Chroma server ``chroma.internal`` talks to the real loopback server of the
``chroma_server`` fixture; a page with ``postgres`` markers reads ``DATABASE_URL``, set to a
database of the real server of the ``postgres_server`` fixture. Everything else (SQLite, Chroma, the offline MiniLM model,
LlamaIndex's agents) is real. Markers (``<!-- docs-test: ... -->``) are described in
:mod:`doc_snippets`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import linecache
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from doc_snippets import (
    Block,
    MarkerError,
    install_modules,
    openai_modules,
    parse_page,
    render_call,
    repo_pages,
    scripted_replies,
    without_times,
)
from llama_index.core import Settings

from llama_memory import ComposableMemory
from llama_memory.testing import LLMCall

ROOT = Path(__file__).resolve().parents[2]
#: The host name the docs give their Chroma server; redirected to the tests' loopback one.
DOCS_CHROMA_HOST = "chroma.internal"


def _collect() -> tuple[dict[str, list[Block]], list[str]]:
    pages: dict[str, list[Block]] = {}
    errors: list[str] = []
    for path in repo_pages(ROOT):
        name = path.relative_to(ROOT).as_posix()
        try:
            pages[name] = parse_page(path.read_text(encoding="utf-8"), name)
        except MarkerError as exc:
            errors.append(str(exc))
    return pages, errors


PAGES, MARKER_ERRORS = _collect()
BLOCKS = [block for blocks in PAGES.values() for block in blocks if block.runs]


class PageRun:
    """One page's run: its namespace, working directory, event loop, LLM queue and calls,
    and the llama_index ``Settings`` it set (restored for the next page)."""

    def __init__(self, page: str, text: str, cwd: Path) -> None:
        self.page = page
        self.text = text
        self.cwd = cwd
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.loop = asyncio.new_event_loop()
        self.queue: list[Any] = []
        self.calls: list[LLMCall] = []
        self.settings: Optional[dict[str, Any]] = None
        self.done: set[str] = set()
        self.failed: Optional[str] = None
        self.output = ""  # what the last Python block printed
        linecache.cache[page] = (len(text), None, text.splitlines(keepends=True), page)

    def run_through(self, target: Block, monkeypatch: pytest.MonkeyPatch) -> None:
        """Run the page's blocks up to ``target``, those not run yet, then ``target``."""
        monkeypatch.chdir(self.cwd)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        install_modules(openai_modules(self.queue, self.calls), monkeypatch.setitem)
        for block in PAGES[self.page]:
            if not block.runs or block.marker("skip") is not None or block.id in self.done:
                if block is target:
                    break
                continue
            if self.failed is not None:
                raise AssertionError(f"not run: {self.failed} failed before it")
            try:
                self._run(block)
            except BaseException:
                self.failed = block.id
                raise
            self.done.add(block.id)
            if block is target:
                break

    def _run(self, block: Block) -> None:
        self.queue.extend(scripted_replies(block.marker("llm") or "[]", block.id))
        if block.marker("llm-receives") is not None:
            self._check_llm_received(block)
        if block.marker("output") is not None:
            assert without_times(block.code) == without_times(self.output), (
                f"{block.id} is not what the block above it printed; it printed:\n{self.output}"
            )
        if block.lang == "python":
            self._exec(block)

    def _exec(self, block: Block) -> None:
        # Blank lines first, so the compiled lines are the page's lines in tracebacks.
        source = "\n" * block.line + block.code
        code = compile(
            source, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        original = dict(vars(Settings))
        if self.settings is not None:
            vars(Settings).update(self.settings)
        asyncio.set_event_loop(self.loop)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                result = eval(code, self.namespace)
                if inspect.iscoroutine(result):  # the block has a top-level await
                    self.loop.run_until_complete(result)
        finally:
            asyncio.set_event_loop(None)
            self.output = printed.getvalue()
            print(self.output, end="")  # still shown by pytest when the test fails
            self.settings = dict(vars(Settings))
            vars(Settings).update(original)

    def _check_llm_received(self, block: Block) -> None:
        assert self.calls, (
            f"{block.id}: shows what the LLM receives, but no LLM was called above it"
        )
        actual = render_call(self.calls[-1])
        assert without_times(block.code) == without_times(actual), (
            f"{block.id} is not what the LLM received in the last call above it; it received:\n"
            f"{actual}"
        )

    def close(self) -> None:
        """Close the memories the page left open, and its event loop (once)."""
        if self.loop.is_closed():
            return
        # In the page's directory: a memory opened on a relative path may resolve it again.
        # (os.chdir, not contextlib.chdir: the project supports Python 3.10.)
        previous = os.getcwd()
        os.chdir(self.cwd)
        try:
            for value in list(self.namespace.values()):
                if isinstance(value, ComposableMemory):
                    try:
                        value.close()
                    except Exception:  # already closed, or a store a later block reopened
                        pass
        finally:
            os.chdir(previous)
        self.loop.close()


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], PageRun]]:
    """One :class:`PageRun` per page, made when its first block runs; the page before it is
    closed then (pages run one after the other)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    runs: dict[str, PageRun] = {}

    def get(page: str) -> PageRun:
        if page not in runs:
            for run in runs.values():
                run.close()
            # Chroma shares one embedded client per persist directory *as written*, so every
            # page's "./memory" would reach the first page's index, whatever the working
            # directory: start each page with none.
            SharedSystemClient.clear_system_cache()
            cwd = tmp_path_factory.mktemp(re.sub(r"\W+", "_", page))
            runs[page] = PageRun(page, (ROOT / page).read_text(encoding="utf-8"), cwd)
        return runs[page]

    yield get
    for run in runs.values():
        run.close()


@pytest.fixture
def docs_chroma_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send the docs' ``chroma.internal`` to the tests' real Chroma server on loopback."""
    import chromadb

    server = request.getfixturevalue("chroma_server")
    real = chromadb.HttpClient

    def redirected(host: str = "localhost", port: int = 8000, *args: Any, **kwargs: Any) -> Any:
        if host == DOCS_CHROMA_HOST:
            host, port = "127.0.0.1", server.port
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(chromadb, "HttpClient", redirected)


@pytest.fixture
def docs_postgres(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``DATABASE_URL``: one database of the tests' real PostgreSQL for every docs page."""
    if not _docs_database:
        _docs_database.append(request.getfixturevalue("postgres_server").create_database("docs_snippets"))
    monkeypatch.setenv("DATABASE_URL", _docs_database[0])


_docs_database: list[str] = []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_doc_snippet(
    block: Block,
    page_runs: Callable[[str], PageRun],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    reason = block.marker("skip")
    if reason is not None:
        pytest.skip(f"{block.id}: {reason}")
    run = page_runs(block.page)
    if DOCS_CHROMA_HOST in run.text:
        request.getfixturevalue("docs_chroma_server")
    if "docs-test: postgres" in run.text:
        request.getfixturevalue("docs_postgres")
    run.run_through(block, monkeypatch)


# --------------------------------------------------------------------------- the collector


def test_markers_are_well_formed() -> None:
    assert not MARKER_ERRORS, "\n".join(MARKER_ERRORS)


def test_collector_finds_the_python_snippets_and_leaves_shell_alone() -> None:
    readme = PAGES["README.md"]
    assert [b.lang for b in readme if b.runs].count("python") >= 2
    assert all(not b.runs for pages in PAGES.values() for b in pages if b.lang == "bash")
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/profile.md", "docs/howto/openai.md"}


def test_snippets_write_inside_their_page_directory() -> None:
    """A snippet's store is a relative path, so the test's working directory holds it."""
    absolute = [b.id for b in BLOCKS if b.lang == "python" and re.search(r"path=[\"']/", b.code)]
    assert not absolute, f'use a relative path (path="./memory") in {absolute}'


def test_parse_page_reads_markers_and_lines() -> None:
    text = (
        "# Page\n\n"
        "<!-- docs-test: skip — pseudo-code -->\n"
        "```python\nsomething(...)\n```\n\n"
        '<!-- docs-test: llm ["Hi.", {"tool_name": "t", "tool_kwargs": {"a": 1}}] -->\n'
        "```python\nx = 1\n```\n"
        "```bash\nmake test\n```\n"
    )
    skipped, scripted, shell = parse_page(text, "p.md")
    assert (skipped.id, skipped.marker("skip"), skipped.code) == (
        "p.md:4",
        "pseudo-code",
        "something(...)",
    )
    assert scripted.id == "p.md:9" and scripted.runs and not shell.runs
    hi, call = scripted_replies(scripted.marker("llm") or "", scripted.id)
    assert hi == "Hi." and (call.tool_name, call.tool_kwargs) == ("t", {"a": 1})


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- docs-test: skp — typo -->\n```python\nx\n```\n", "unknown docs-test marker 'skp'"),
        ("<!-- docs-test: skip -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- docs-test: skip — why -->\ntext\n```python\nx\n```\n", "right above a code fence"),
        ("<!-- docs-test: skip — why -->\n", "no code fence after it"),
        ("```python\nx\n", "never closed"),
    ],
)
def test_parse_page_refuses_bad_markers(text: str, error: str) -> None:
    with pytest.raises(MarkerError, match=re.escape(error)):
        parse_page(text, "p.md")


def test_a_failing_snippet_points_at_its_page_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "intro\n```python\nimport asyncio\nawait asyncio.sleep(0)\n1 / 0\n```\n```python\nx = 2\n```\n"
    page = "fake-page.md"
    first, second = parse_page(text, page)
    monkeypatch.setitem(PAGES, page, [first, second])
    run = PageRun(page, text, tmp_path)
    try:
        with pytest.raises(ZeroDivisionError) as failure:
            run.run_through(first, monkeypatch)
        assert (failure.traceback[-1].path, failure.traceback[-1].lineno + 1) == (page, 5)
        with pytest.raises(AssertionError, match="not run: fake-page.md:2 failed before it"):
            run.run_through(second, monkeypatch)
    finally:
        run.close()
