import json
import math

import pytest

from kbcli import KBError
from kbcli.config.lookup import Config
from kbcli.eval.beir import (
    DatasetError,
    choose_split,
    evaluate,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    rank_documents,
    recall_at_k,
    score_run,
)


def test_ndcg_graded_by_hand():
    qrels = {"a": 3, "b": 1, "c": 0, "d": 2}
    ranking = ["b", "x", "a"]
    dcg = 1 / math.log2(2) + 0 + 3 / math.log2(4)  # gain = grade (trec_eval ndcg_cut)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(ranking, qrels, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "d", "b"], qrels, 10) == pytest.approx(1.0)
    # cut at k: only the first 2 count, ideal also cut at 2
    assert ndcg_at_k(["x", "a"], qrels, 2) == pytest.approx(
        (3 / math.log2(3)) / (3 + 2 / math.log2(3))
    )


def test_recall_and_mrr_by_hand():
    qrels = {"a": 1, "b": 2, "z": 0}
    assert recall_at_k(["z", "a", "q"], qrels, 10) == 0.5
    assert recall_at_k(["z", "a", "b"], qrels, 2) == 0.5
    assert mrr_at_k(["z", "q", "b"], qrels, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["z", "q", "b"], qrels, 2) == 0.0


def test_ties_broken_by_document_id():
    assert rank_documents([("b", 1.0), ("a", 1.0), ("c", 2.0), ("a", 0.5)]) == ["c", "a", "b"]


def test_unanswered_query_scores_zero_and_unjudged_skipped():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    scores = score_run({"q1": ["a"]}, qrels)
    assert scores["ndcg@10"] == pytest.approx(0.5)  # q2 unanswered = 0; q3 has no relevant doc
    assert scores["mrr@10"] == pytest.approx(0.5)


def test_percentile_nearest_rank():
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 95) == 5.0
    assert percentile([1.0, 2.0], 50) == 1.0
    assert percentile([], 95) == 0.0


def write_beir(root, corpus, queries, qrels, split="test"):
    root.mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w") as fh:
        for doc_id, (title, text) in corpus.items():
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as fh:
        for qid, text in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, rels in qrels.items() for d, g in rels.items()]
    (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")


CORPUS = {
    "d1": ("Password reset", "How to reset a forgotten password in the admin console."),
    "d2": ("Billing", "Invoices are sent monthly; change the billing address in settings."),
    "d3": ("Errors", "ERR_5001 means the password reset token expired. 密码重置失败。"),
    "d4": ("Shipping", "Parcels ship within two days from the nearest warehouse."),
}
QUERIES = {
    "q1": "reset password",
    "q2": "billing address invoices",
    "q3": "ERR_5001",
    "q4": "密码重置",
    "q5": "quantum chromodynamics",  # judged, nothing matches: scores 0
}
QRELS = {
    "q1": {"d1": 2, "d3": 1},
    "q2": {"d2": 1},
    "q3": {"d3": 1},
    "q4": {"d3": 1},
    "q5": {"d4": 1},
}


@pytest.fixture
def beir(tmp_path):
    root = tmp_path / "tiny"
    write_beir(root, CORPUS, QUERIES, QRELS)
    return root


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "semantic"])
def test_evaluate_end_to_end(beir, mode):
    seen = []
    result = evaluate(beir, mode=mode, config=Config(), progress=lambda *a: seen.append(a))
    assert list(result) == [
        "dataset",
        "split",
        "mode",
        "queries",
        "ndcg@10",
        "recall@10",
        "recall@100",
        "mrr@10",
        "hit@1",
        "hit@3",
        "latency_ms",
    ]
    assert (result["dataset"], result["split"], result["mode"], result["queries"]) == (
        "tiny",
        "test",
        mode,
        5,
    )
    assert set(result["latency_ms"]) == {"mean", "p95"}
    assert seen[-1] == ("search", 5, 5) and ("index", 4, 4) in seen
    if mode == "keyword":
        # q1..q4 rank a relevant doc first; q1 gets d1 (grade 2) first: nDCG 1; q5 finds nothing
        assert result["mrr@10"] == pytest.approx(4 / 5)
        assert result["recall@10"] == pytest.approx(4 / 5)


class Other:
    provider, model = "other", "m"

    def embed_documents(self, texts):
        return [[1.0, float(len(t))] for t in texts]

    def embed_query(self, text):
        return [1.0, 0.0]


def test_evaluate_reuses_a_kept_database(beir, tmp_path):
    db = tmp_path / "eval.db"
    first = evaluate(beir, mode="keyword", db=db, config=Config())
    calls = []
    second = evaluate(
        beir, mode="keyword", db=db, config=Config(), progress=lambda *a: calls.append(a)
    )
    assert first["ndcg@10"] == second["ndcg@10"]
    assert not [c for c in calls if c[0] == "index"]  # not indexed again
    with pytest.raises(DatasetError, match="indexed with embedder simple/char-hash-64"):
        evaluate(beir, mode="keyword", db=db, config=Config(), embedder=Other())
    other = tmp_path / "other"
    write_beir(other, {"x": ("t", "different corpus")}, {"q": "x"}, {"q": {"x": 1}})
    with pytest.raises(DatasetError, match="already holds other documents"):
        evaluate(other, mode="keyword", db=db, config=Config())


def test_split_choice(tmp_path):
    root = tmp_path / "s"
    (root / "qrels").mkdir(parents=True)
    (root / "qrels" / "train.tsv").write_text("q\td\ts\n")
    (root / "qrels" / "test.tsv.enc").write_bytes(b"\x00secret")
    assert choose_split(root) == "train"  # .enc is never read
    (root / "qrels" / "dev.tsv").write_text("q\td\ts\n")
    assert choose_split(root) == "dev"
    with pytest.raises(DatasetError, match="choose a split from: dev, train"):
        choose_split(root, "test")
    (root / "qrels" / "a.tsv").write_text("")
    (root / "qrels" / "dev.tsv").unlink()
    (root / "qrels" / "train.tsv").unlink()
    (root / "qrels" / "b.tsv").write_text("")
    with pytest.raises(DatasetError, match="Several splits"):
        choose_split(root)


def test_errors_are_one_line_kb_errors(tmp_path, beir):
    with pytest.raises(KBError, match="No folder"):
        load_beir(tmp_path / "missing")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "ok"}\n{not json\n')
    with pytest.raises(DatasetError, match=r"queries.jsonl line 2 is not valid JSON"):
        load_beir(beir)
    (beir / "corpus.jsonl").unlink()
    with pytest.raises(DatasetError, match="Missing .*corpus.jsonl") as info:
        load_beir(beir)
    assert "\n" not in str(info.value)


def test_bad_qrels_line(tmp_path, beir):
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(DatasetError, match="line 2: score 'high' is not a number"):
        load_beir(beir)


def test_ranking_goes_deep_enough_for_recall_when_documents_have_many_chunks(tmp_path, monkeypatch):
    import kbcli.eval.beir as ev

    # 12 documents of 3 chunks each that all match; a pool of 4 chunks names at most 4 documents
    corpus = {
        f"d{i:02}": (
            f"Doc {i}",
            "\n\n".join(f"paragraph {p} about turbines " * 12 for p in range(3)),
        )
        for i in range(12)
    }
    root = tmp_path / "deep"
    write_beir(root, corpus, {"q": "turbines"}, {"q": {d: 1 for d in corpus}})
    monkeypatch.setattr(ev, "CHUNK_POOL", 4)
    monkeypatch.setattr(ev, "RANKING_DEPTH", 10)
    calls = []
    original = ev._documents_of
    monkeypatch.setattr(ev, "_documents_of", lambda hits: calls.append(len(hits)) or original(hits))
    result = evaluate(root, mode="keyword", k=2, config=Config())
    assert calls[0] == 4 and len(calls) > 1  # the timed search, then deeper ones
    assert result["recall@100"] == 1.0
    assert result["recall@2"] == round(2 / 12, 4)  # @k follows k


def test_an_interrupted_kept_index_is_rebuilt_on_the_next_run(beir, tmp_path):
    db = tmp_path / "eval.db"

    def interrupt(stage, done, total):
        if stage == "index":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(beir, mode="keyword", db=db, config=Config(), progress=interrupt)
    # half-written: the next run of the same corpus starts over instead of refusing
    again = evaluate(beir, mode="keyword", db=db, config=Config())
    clean = evaluate(beir, mode="keyword", config=Config())
    assert again["ndcg@10"] == clean["ndcg@10"] and again["mrr@10"] == clean["mrr@10"]
    # another corpus still may not use it
    other = tmp_path / "other"
    write_beir(other, {"x": ("t", "different corpus")}, {"q": "x"}, {"q": {"x": 1}})
    with pytest.raises(DatasetError, match="already holds other documents"):
        evaluate(other, mode="keyword", db=db, config=Config())
