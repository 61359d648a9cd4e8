"""A knowledge base handed to an LLM as a function-calling tool.

Builds a knowledge base over ``--path`` (a file or a folder, ``--ext`` picks the extensions) on
``SQLiteStore`` with ``SimpleTextChunker(300, 50)`` and the built-in embedder, gives
``kb.as_tool()`` to a minimal function-calling loop against any OpenAI-compatible chat endpoint
and prints the model's answer with the passages it was given as citations.

    python examples/agent_demo.py --path examples/docs --ext .md,.txt \\
        --base-url http://localhost:11434/v1 --model llama3.1 "How do I reset my password?"

The API key is read from ``OPENAI_API_KEY`` (local servers such as Ollama need none).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SYSTEM = (
    "You answer questions from a knowledge base. Call knowledge_search to find passages, "
    "then answer briefly and cite the passages you used as [1], [2] ..."
)


def build_knowledge_base(path: Path, extensions: set[str], db: Path) -> tuple[Any, int]:
    """A knowledge base in ``db`` holding ``path`` (a file, or a folder's files with one of
    ``extensions``); returns it and how many files went in."""
    from kbcli import KnowledgeBase, SQLiteStore
    from kbcli.ingest import SimpleTextChunker

    kb = KnowledgeBase(store=SQLiteStore(db), chunker=SimpleTextChunker(300, 50))
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in extensions)
    for file in files:
        kb.ingest_file(file)
    return kb, len(files)


def ask(question: str, tool: Any, client: Any, model: str, max_rounds: int = 4) -> tuple[str, list]:
    """Run the function-calling loop; returns the answer and the citations the tool gave."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    citations: dict[str, Any] = {}
    for _ in range(max_rounds):
        response = client.chat.completions.create(
            model=model, messages=messages, tools=[tool.to_openai_tool()]
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or "", list(citations.values())
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            if call.function.name == tool.name:
                result = tool.call(call.function.arguments)  # never raises
                text = result.text
                for citation in result.citations:
                    citations.setdefault(citation.id, citation)
            else:
                text = f"Error: no tool named {call.function.name!r}; use {tool.name}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return "(no answer: the model kept calling tools)", list(citations.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("question", help="What to ask.")
    parser.add_argument("--path", type=Path, required=True, help="A file or folder to index.")
    parser.add_argument("--ext", default=".md,.txt", help="Extensions in a folder (.md,.txt).")
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible API base URL.")
    parser.add_argument("--model", required=True, help="Chat model name.")
    parser.add_argument("--db", type=Path, help="Keep the index in this file [temporary].")
    args = parser.parse_args(argv)

    from openai import OpenAI

    extensions = {e.strip().lower() for e in args.ext.split(",") if e.strip()}
    extensions = {e if e.startswith(".") else f".{e}" for e in extensions}
    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or Path(scratch) / "agent-demo.db"
        kb, count = build_knowledge_base(args.path.expanduser(), extensions, db)
        try:
            if not count:
                print(f"No files with {args.ext} under {args.path}", file=sys.stderr)
                return 1
            print(f"Indexed {count} file{'s' if count != 1 else ''}.", file=sys.stderr)
            client = OpenAI(
                base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY") or "not-needed"
            )
            answer, citations = ask(args.question, kb.as_tool(), client, args.model)
        finally:
            kb.close()
    print(answer.strip())
    if citations:
        print("\nSources:")
        for number, citation in enumerate(citations, start=1):
            citation.number = number
            print(f"  [{number}] {citation.label()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
