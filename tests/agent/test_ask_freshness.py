"""kb ask never cites a changed or missing passage without saying so in its sources (issue
39): the evidence's freshness is checked, the sources line and the JSON say it."""

from __future__ import annotations

import json

import pytest

from fake_chat import FakeChatServer
from kbcli import KnowledgeBase, SimpleEmbedder
from kbcli.cli.render.answers import answer_output
from kbcli.config.lookup import AnswerConfig, Config, RAGConfig

VPN = (
    "# VPN\n\nThe VPN gateway is vpn.example.com.\n\n## Password\n\n"
    "The VPN password rotates every month; reset it from the self-service portal.\n"
)


@pytest.fixture
def kb(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    vpn = folder / "vpn.md"
    vpn.write_text(VPN, encoding="utf-8")
    with FakeChatServer() as server:
        config = Config(rag=RAGConfig(answer=AnswerConfig(base_url=server.url + "/v1")))
        kb = KnowledgeBase.open(tmp_path / "kb.db", config=config, embedder=SimpleEmbedder())
        kb.ingest_file(vpn)
        yield kb, vpn
        kb.close()


def test_a_current_passage_is_cited_plainly(kb, capsys):
    kb, vpn = kb
    answer = kb.ask("How often does the VPN password rotate?")
    assert answer.cited == [1]
    assert answer.citations[0].stale_words is None
    assert "freshness" not in answer.to_dict()["citations"][0]
    answer_output(answer, "text")
    assert "since indexed" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "words", "state"),
    [("edit", "changed since indexed", "changed"), ("delete", "file missing", "missing")],
)
def test_a_stale_passage_is_cited_saying_so(kb, capsys, change, words, state):
    kb, vpn = kb
    if change == "edit":
        vpn.write_text(VPN.replace("every month", "every week, from now on"), encoding="utf-8")
    else:
        vpn.unlink()
    answer = kb.ask("How often does the VPN password rotate?")
    (cited,) = answer.citations
    assert cited.stale_words == words
    data = answer.to_dict()["citations"][0]
    assert data["freshness"]["state"] == state
    json.dumps(data)
    answer_output(answer, "text")
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  [1] "))
    assert line.endswith(f"({words})")
    answer_output(answer, "md")
    md = capsys.readouterr().out
    assert next(x for x in md.splitlines() if x.startswith("- [1] ")).endswith(f"({words})")
