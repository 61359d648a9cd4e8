"""Output for the ``kb`` command: Rich tables and progress, JSON, messages on stderr.

Results go to stdout; notes, warnings, errors and progress go to stderr. ``--json`` output is
plain ``json.dumps`` on stdout and nothing else. Rich is imported only by the functions that
draw tables or progress, so JSON output and error messages stay cheap.

One module per kind of output (:mod:`.messages`, :mod:`.names`, :mod:`.snippets`, :mod:`.hits`,
:mod:`.explain`, :mod:`.documents`, :mod:`.reports`, :mod:`.progress`, :mod:`.ingest`,
:mod:`.answers`); every name is re-exported here, where the commands take them from; a
module loads on first use of one of its names.
"""

from __future__ import annotations

# Eager: the submodule of the same name would otherwise shadow the function once imported.
from kbcli.cli.render.progress import progress
from kbcli.system.exports import lazy_exports

# name -> module; each module loads on first use (PEP 562), so a command imports only the
# output it draws (kb search: hits, snippets, names, messages, explain).
_EXPORTS = {
    "answer_output": "answers", "cited_location": "answers", "prompt_output": "answers",
    "documents_json": "documents", "documents_output": "documents",
    "documents_table": "documents", "numbered": "documents", "explain_text": "explain",
    "MIN_SNIPPET": "hits", "SEARCH_FORMATS": "hits", "hit_json": "hits",
    "no_results_text": "hits", "search_json": "hits", "search_output": "hits",
    "search_table": "hits", "ingest_summary": "ingest", "interrupted_summary": "ingest",
    "error": "messages", "message": "messages", "print_json": "messages",
    "print_jsonl": "messages", "result": "messages", "stderr_is_terminal": "messages",
    "warning": "messages", "display_path": "names", "file_names": "names",
    "human_size": "names", "needs_quoting": "names", "quote_name": "names",
    "shorten_source": "names", "config_table": "reports",
    "describe_embedder": "reports", "doctor_lines": "reports", "eval_summary": "reports",
    "stats_table": "reports", "HIGHLIGHT_STYLE": "snippets", "SNIPPET_WIDTH": "snippets",
    "snippet": "snippets", "term_pattern": "snippets",
}  # fmt: skip


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


TYPE_CHECKING = False
if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from kbcli.cli.render.answers import answer_output, cited_location, prompt_output
    from kbcli.cli.render.documents import (
        documents_json,
        documents_output,
        documents_table,
        numbered,
    )
    from kbcli.cli.render.explain import explain_text
    from kbcli.cli.render.hits import (
        MIN_SNIPPET,
        SEARCH_FORMATS,
        hit_json,
        no_results_text,
        search_json,
        search_output,
        search_table,
    )
    from kbcli.cli.render.ingest import ingest_summary, interrupted_summary
    from kbcli.cli.render.messages import (
        error,
        message,
        print_json,
        print_jsonl,
        result,
        stderr_is_terminal,
        warning,
    )
    from kbcli.cli.render.names import (
        display_path,
        file_names,
        human_size,
        needs_quoting,
        quote_name,
        shorten_source,
    )
    from kbcli.cli.render.reports import (
        config_table,
        describe_embedder,
        doctor_lines,
        eval_summary,
        stats_table,
    )
    from kbcli.cli.render.snippets import HIGHLIGHT_STYLE, SNIPPET_WIDTH, snippet, term_pattern

__all__ = [
    "HIGHLIGHT_STYLE", "MIN_SNIPPET", "SEARCH_FORMATS", "SNIPPET_WIDTH", "answer_output",
    "cited_location", "config_table", "describe_embedder", "display_path", "doctor_lines",
    "documents_json", "documents_output", "documents_table", "error", "eval_summary",
    "explain_text", "file_names", "hit_json", "human_size", "ingest_summary",
    "interrupted_summary", "message", "needs_quoting", "no_results_text", "numbered",
    "print_json", "print_jsonl", "progress", "prompt_output", "quote_name", "result", "search_json",
    "search_output", "search_table", "shorten_source", "snippet", "stderr_is_terminal",
    "stats_table", "term_pattern", "warning",
]  # fmt: skip
