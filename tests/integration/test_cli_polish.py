"""The command line as a new user meets it: quick to answer, readable, and exact about
what was wrong.

Most commands run in this process (``main([...])``, with the output captured); the
claims about a process (what it imports, a pipe between two commands) run one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import llama_memory
from helpers import user
from llama_memory import ComposableMemory, ScopeError
from llama_memory.admin.cli import CELL_WIDTH, main
from llama_memory.admin.memory_admin import MemoryAdmin

ROOT = Path(__file__).resolve().parents[2]
LONG_ID = "u" * 1000
TWO_LINES = "first\nsecond"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> Path:
    """Three users, one message each: an ordinary id, a 1,000-character one and one
    holding a newline."""
    path = tmp_path_factory.mktemp("polish") / "store"
    for user_id in ("alice", LONG_ID, TWO_LINES):
        memory = ComposableMemory.from_defaults(user_id=user_id, path=path, embed_model=embed_model)
        memory.put_messages([user("I play the cello in a string quartet.")])
        memory.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    """``llama-memory args`` in this process: exit status, stdout, stderr."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own exits (usage errors, --help)
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def in_a_process(code: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=120, **kwargs,
    )  # fmt: skip


# --------------------------------------------------------------------------- quick


def test_help_version_and_listing_commands_import_no_llamaindex(store: Path) -> None:
    """`--help`, `--version`, `users`, `stats` and `sessions` answer without importing
    LlamaIndex, Chroma or the embedding runtime (what made each take seconds; the
    timings are in bench.cli_speed)."""
    code = f"""
import sys
from llama_memory.admin.cli import main
for argv in (["--help"], ["--version"]):
    try:
        main(argv)
    except SystemExit:
        pass
for argv in (["users"], ["stats"], ["sessions", "alice"]):
    assert main([*argv, "--store", {str(store)!r}]) == 0, argv
heavy = sorted(m for m in ("llama_index.core", "chromadb", "onnxruntime", "tokenizers") if m in sys.modules)
print("HEAVY", heavy)
"""
    done = in_a_process(code)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout[-500:]


def test_the_package_names_load_on_first_use() -> None:
    """`import llama_memory` is quick, and every public name still resolves from it."""
    done = in_a_process(
        "import sys, llama_memory; print('LOADED', 'llama_index.core' in sys.modules)"
    )
    assert "LOADED False" in done.stdout, done.stderr
    for name in llama_memory.__all__:
        assert getattr(llama_memory, name) is not None
        assert name in dir(llama_memory)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        llama_memory.Nope  # noqa: B018


# --------------------------------------------------------------------------- readable


def test_long_and_multi_line_user_ids_keep_the_table_one_line_a_user(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "users", "--store", store)
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 4  # the header and one line a user
    assert any(line.startswith("first\\nsecond ") for line in lines)
    long_row = next(line for line in lines if line.startswith("uuu"))
    assert "…" in long_row
    # Every column starts at the same place: no cell wider than CELL_WIDTH pushed it.
    assert all(len(line.split("  ")[0]) <= CELL_WIDTH for line in lines)
    status, out, _ = run(capsys, "users", "--store", store, "--json")
    assert LONG_ID in out and "first\\nsecond" in out  # JSON gives the ids whole


def test_reconcile_prints_sentences_not_reprs(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "reconcile", "--store", store)
    assert status == 0
    assert "ReconcileReport(" not in out
    assert "vector: 3 users compared; 0 missing vectors flagged for indexing" in out


def test_counts_of_one_are_singular(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "records", "alice", "--store", store)
    assert out.splitlines()[-1] == "1 record"
    _, out, _ = run(capsys, "show", "alice", "--store", store)
    assert "1 session, 1 message, 1 record, 0 current triples, 0 profile fields" in out


def test_explain_indents_what_it_left_out(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The records listed under "left out" sit under their reason, not at the margin."""
    _, out, _ = run(capsys, "explain", "alice", "what is my wife's name?", "--store", store)
    tail = out.split("\nleft out:\n", 1)[1].splitlines()
    reasons = [i for i, line in enumerate(tail) if line.startswith("  - ")]
    assert reasons, out  # the cello record is not relevant to the question
    for i in reasons:
        assert tail[i + 1].startswith("    [vector]"), tail[i : i + 3]
        assert tail[i + 2].startswith("         user: I play the cello")


def test_explain_reports_the_budget_it_was_given(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--token-limit`` reaches the block explain composes, and its header and JSON say the
    budget the block was fitted to."""
    _, out, _ = run(capsys, "explain", "alice", "what do I play?", "--token-limit", "40", "--store", store)
    assert " of 40 tokens" in out
    status, out, _ = run(capsys, "explain", "alice", "what do I play?", "--store", store, "--json")
    assert status == 0 and json.loads(out)["token_limit"] == 1500


# --------------------------------------------------------------------------- errors


def test_a_bad_flag_shows_the_commands_own_usage(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "users", "--jsn", "--store", store)
    assert status == 2
    assert err.startswith("usage: llama-memory users ")
    assert "--json" in err  # the command's options, which the top-level usage does not list
    assert "unrecognized arguments: --jsn" in err


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["serch", "alice", "cello"], "invalid choice: 'serch'; did you mean 'search'?"),
        (["purge"], "did you mean 'purge-expired'?"),
        (["jobs", "retyr"], "invalid choice: 'retyr'; did you mean 'retry'?"),
        (["search", "alice", "cello", "--topk", "3"], "unrecognized arguments: --topk 3; --topk: did you mean --top-k?"),
        (["explain", "alice", "cello", "--top_k=3"], "--top_k: did you mean --top-k?"),
        (["records", "alice", "--sesion", "s1"], "--sesion: did you mean --session?"),
        (["--jsn", "users"], "--jsn: did you mean --json?"),
    ],
)
def test_a_mistyped_command_or_option_gets_the_closest_one(
    store: Path, capsys: pytest.CaptureFixture[str], args: list[str], meant: str
) -> None:
    status, _, err = run(capsys, *args, "--store", store)
    assert status == 2
    assert meant in err


def test_a_mistyped_store_option_is_named_beside_the_missing_store(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "users", "--stroe", "./memory")
    assert status == 2
    assert "the following arguments are required: --store; --stroe: did you mean --store?" in err
    assert "--verison: did you mean --version?" in run(capsys, "--verison")[2]
    assert run(capsys, "users", "--store", "./memory", "-x")[2].endswith("unrecognized arguments: -x\n")  # none near


def test_search_takes_top_k_as_explain_does_and_log_levels_in_any_case(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "search", "alice", "cello", "--top-k", "1", "--json", "--store", store)
    assert status == 0 and len(json.loads(out)) == 1
    from llama_memory.admin.cli import build_parser

    assert build_parser().parse_args(["mcp", "--store", str(store), "--log-level", "info"]).log_level == "INFO"


@pytest.mark.parametrize("inside", ["memory.sqlite3", "chroma"])
def test_a_path_inside_a_store_names_the_stores_directory(
    store: Path, capsys: pytest.CaptureFixture[str], inside: str
) -> None:
    status, _, err = run(capsys, "users", "--store", store / inside)
    assert status == 1
    assert f"{store / inside} is inside the store {store}: did you mean {store}?" in err
    assert "did you mean" not in run(capsys, "users", "--store", store / "nothing" / "here" / "at" / "all")[2]


def test_export_to_a_directory_or_into_a_missing_one_says_so_in_words(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "export", "alice", "-o", tmp_path, "--store", store)
    assert status == 1
    assert f"{tmp_path} is a directory: export writes one file, e.g. {tmp_path / 'export.jsonl'}" in err
    status, _, err = run(capsys, "export", "alice", "-o", tmp_path / "nope" / "x.jsonl", "--store", store)
    assert status == 1
    assert f"there is no directory {tmp_path / 'nope'} (create it first)" in err
    assert "Errno" not in err and not (tmp_path / "nope").exists()


def test_copy_to_a_directory_says_it_takes_a_postgresql_url(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "copy", "--from", store, "--to", "./dir")
    assert status == 1
    assert "copy --to takes a PostgreSQL URL" in err
    assert "got './dir', a path" in err
    assert "that is not one" not in err


def test_a_mistyped_records_filter_is_named_not_shown_as_no_records(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The listing stays empty (a script reads "0 records", status 0); stderr says why."""
    status, out, err = run(capsys, "records", "alice", "--source", "vectors", "--store", store)
    assert (status, out.strip()) == (0, "0 records")
    assert err.strip() == (
        "llama-memory records: note: no record of tenant 'default' comes from a source named "
        "'vectors'; its records' sources are 'vector'"
    )
    status, out, err = run(capsys, "records", "alice", "--session", "nope", "--json", "--store", store)
    assert (status, json.loads(out)) == (0, [])
    assert "user 'alice' has no session 'nope'; their sessions are '" in err
    # A filter that names what there is but matches nothing: no note.
    status, out, err = run(capsys, "records", "alice", "--source", "vector", "--since", "2999-01-01", "--store", store)
    assert (status, out.strip(), err) == (0, "0 records", "")


def test_a_tenant_the_store_does_not_have_names_the_ones_it_has(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "users", "--store", store, "--tenant", "prod")
    assert (status, out) == (0, "no users in tenant 'prod' (the store's tenants: 'default')\n")
    status, _, err = run(capsys, "show", "alice", "--store", store, "--tenant", "prod")
    assert status == 1
    assert err.endswith("no user 'alice' in tenant 'prod' of " f"{store}; it has no users (the store's tenants: 'default')\n")
    status, out, _ = run(capsys, "users", "--store", store)
    assert status == 0 and "(the store's tenants" not in out


@pytest.mark.parametrize("command", [["users"], ["import", "backup.jsonl"], ["export", "--all"]])
def test_an_empty_tenant_is_refused_not_taken_for_the_default(
    store: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """``--tenant "$TENANT"`` with the variable unset: not the default tenant in silence."""
    status, out, err = run(capsys, *command, "--store", store, "--tenant", "")
    assert (status, out) == (2, "")
    assert "argument --tenant: expected a tenant name, got '' (leave --tenant out for the default)" in err


def test_export_in_the_command_lines_order_says_the_call_to_make(store: Path, tmp_path: Path) -> None:
    """``admin.export("alice", "alice.jsonl")`` (USER -o FILE, as on the command line)."""
    out = tmp_path / "alice.jsonl"
    with MemoryAdmin(store) as admin:
        for given in (("alice", str(out)), (str(out), "alice")):
            with pytest.raises(TypeError, match=r"^export takes the file first, then a list of user ids, not the string "):
                admin.export(*given)
            with pytest.raises(TypeError, match=rf"export\({str(out)!r}, users=\['alice'\]\)$"):
                admin.export(*given)
        assert not out.exists() and not (tmp_path / "alice").exists()
        assert admin.export(str(out), users=["alice"]) >= 1 and out.exists()


def broken_factory() -> Any:
    """An application's LLM factory that fails as one without its API key does."""
    raise ValueError("OPENAI_API_KEY is not set")


@pytest.mark.parametrize(
    ("option", "spec", "said"),
    [
        ("--llm", "gpt-4o-mini", "--llm takes module:name, e.g. myapp.llms:make_llm (a LlamaIndex LLM, or a function "
         "returning one); got 'gpt-4o-mini'"),
        ("--llm", "json:dumps", "--llm json:dumps: calling it without arguments failed: TypeError: dumps() missing 1 "
         "required positional argument: 'obj' (name an object, or a function that takes no arguments)"),
        ("--llm", "test_cli_polish:broken_factory", "--llm test_cli_polish:broken_factory: calling it without arguments "
         "failed: ValueError: OPENAI_API_KEY is not set"),
        ("--llm", "json:JSONDecoder", "--llm json:JSONDecoder: expected a LlamaIndex LLM (or a function returning one), "
         "got JSONDecoder"),
        ("--embed-model", "test_cli_polish:broken_factory", "--embed-model test_cli_polish:broken_factory: calling it "
         "without arguments failed: ValueError: OPENAI_API_KEY is not set"),
    ],
)
def test_an_object_named_module_name_that_fails_to_load_is_one_line_not_a_traceback(
    store: Path, capsys: pytest.CaptureFixture[str], option: str, spec: str, said: str
) -> None:
    command = ["worker", "--once"] if option == "--llm" else ["search", "alice", "cello"]
    status, out, err = run(capsys, *command, "--store", store, option, spec)
    assert (status, out) == (1, "")
    assert err == f"llama-memory {command[0]}: error: {said}\n"


@pytest.mark.parametrize("content", ['{"users": ["alice"]}\n', "[1, 2]\n"])
def test_json_of_neither_kind_says_what_import_reads(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    """Not only "not a SimpleChatStore file": the user may have meant an export."""
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(content)
    status, out, err = run(capsys, "import", wrong, "--store", store)
    assert status == 1 and not out
    assert f"{wrong} is neither a llama-memory export" in err
    assert "nor a SimpleChatStore JSON file (a JSON object whose 'store' maps" in err


@pytest.mark.parametrize("blank", [" ", "\t\n"])
def test_a_blank_user_id_is_refused_like_an_empty_one(store: Path, blank: str) -> None:
    with pytest.raises(ScopeError, match="needs a user_id .*blank"):
        ComposableMemory.from_defaults(user_id=blank, path=store)
    with MemoryAdmin(store) as admin, pytest.raises(ValueError, match="user_id must be a non-empty"):
        admin.sessions(blank)


# --------------------------------------------------------------------------- pipes


def test_import_dash_reads_the_export_from_a_pipe(store: Path, tmp_path: Path) -> None:
    """`llama-memory export USER | llama-memory import - --store NEW`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "llama_memory"]
    export = subprocess.Popen(
        [*command, "export", "alice", "--store", str(store)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    imported = subprocess.run(
        [*command, "import", "-", "--store", str(tmp_path / "new")],
        stdin=export.stdout, capture_output=True, text=True, env=env, cwd=ROOT, timeout=240,
    )  # fmt: skip
    assert export.wait(timeout=60) == 0
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "imported into tenant 'default': 1 message, 1 record"
    with MemoryAdmin(tmp_path / "new") as copy, MemoryAdmin(store) as original:
        assert [u.user_id for u in copy.users()] == ["alice"]
        assert [r.text for r in copy.records("alice")] == [r.text for r in original.records("alice")]
