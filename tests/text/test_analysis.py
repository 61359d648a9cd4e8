import pytest

from kbcli import Analyzer, Document, SQLiteStore
from kbcli.errors import InvalidOptionError
from kbcli.text.analysis import MAX_QUERY_TERMS, cjk_terms


def test_stemming_and_lowercase():
    assert Analyzer().terms("Running RUNS runner") == ["run", "run", "runner"]
    assert Analyzer(stem=False).terms("Running") == ["running"]


def test_stopwords_dropped_and_kept():
    assert Analyzer().terms("the cat is on the mat") == ["cat", "mat"]
    assert "the" in Analyzer(stopwords=False).terms("the cat")


def test_chinese_mixed_simplified():
    terms = Analyzer().terms("ERR_5001 密码重置失败")
    assert "err_5001" in terms
    assert {"密码", "重置", "失败"} <= set(terms)  # bigrams
    assert {"密", "码"} <= set(terms)  # and characters


def test_chinese_traditional():
    terms = Analyzer().terms("密碼重置失敗")
    assert {"密碼", "重置", "失敗", "碼"} <= set(terms)


def test_query_finds_chinese_without_spaces(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("zh", "用户登录时提示密码重置失败"), Document("en", "reset failed")])
    hits = store.keyword_search("密码重置", k=5)
    assert [h.document.id for h in hits] == ["zh"]


def test_identifiers_whole_and_by_parts():
    terms = Analyzer().terms("set password_reset_timeout in v2.3.1 (ERR_5001)")
    assert "password_reset_timeout" in terms
    assert {"password", "reset", "timeout"} <= set(terms)
    assert "v2.3.1" in terms
    assert "err_5001" in terms and "5001" in terms


def test_identifier_search_as_written_and_by_parts(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add(
        [
            Document("cfg", "Set password_reset_timeout to 30 seconds."),
            Document("rel", "Released in v2.3.1 with fixes."),
            Document("old", "Released in v2.3.0 with fixes."),
        ]
    )
    assert store.keyword_search("password_reset_timeout", k=1)[0].document.id == "cfg"
    assert store.keyword_search("password reset", k=1)[0].document.id == "cfg"
    assert store.keyword_search("v2.3.1", k=1)[0].document.id == "rel"


def test_full_width_and_apostrophes():
    assert Analyzer().terms("ＥＲＲ＿５００１") == ["err_5001", "err", "5001"]
    assert Analyzer().terms("John's car doesn't") == ["john", "car", "doesnt"]


def test_hyphenated_words_give_parts_only():
    assert Analyzer().terms("state-of-the-art") == ["state", "art"]


def test_language_none_is_the_reference_tokenizer():
    assert Analyzer(language="none").terms("The Running 密码") == ["the", "running", "密码"]


def test_signature_changes_with_settings():
    signatures = {
        Analyzer().signature,
        Analyzer(stem=False).signature,
        Analyzer(stopwords=False).signature,
        Analyzer(language="none").signature,
        Analyzer(cjk="bigrams").signature,
    }
    assert len(signatures) == 5
    assert Analyzer().signature.startswith("v2;")
    # same output, same signature: switching auto/en/zh needs no rebuild
    assert Analyzer(language="en").signature == Analyzer(language="zh").signature


def test_cjk_schemes():
    assert cjk_terms("密码重置", "bigrams") == ["密码", "码重", "重置"]
    assert cjk_terms("密", "bigrams") == ["密"]
    assert cjk_terms("密码", "chars+bigrams") == ["密", "码", "密码"]
    assert cjk_terms("密码", "chars") == ["密", "码"]


def test_bad_settings_rejected():
    with pytest.raises(InvalidOptionError, match="choose one of"):
        Analyzer(language="fr")
    with pytest.raises(InvalidOptionError, match="CJK scheme"):
        Analyzer(cjk="words")


def test_query_terms_bounded_for_pasted_paragraphs():
    text = " ".join(f"word{i}" for i in range(5 * MAX_QUERY_TERMS))
    counts = Analyzer().query_counts(text + " word0 word0")
    assert len(counts) == MAX_QUERY_TERMS
    assert counts["word0"] == 3


def test_long_query_stays_fast(tmp_path):
    import time

    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document(str(i), f"alpha beta gamma{i}") for i in range(200)])
    paragraph = " ".join(f"token{i} gamma{i % 200}" for i in range(3000))
    start = time.perf_counter()
    hits = store.keyword_search(paragraph, k=5)
    assert hits and time.perf_counter() - start < 2.0


@pytest.mark.parametrize("stem,stopwords", [(True, True), (False, False)])
def test_text_without_cjk_gives_the_terms_of_the_mixed_path(stem, stopwords):
    """terms() skips the per-token CJK test when the text has no CJK at all; the terms of the
    Latin part must be exactly those the mixed path (a CJK word after it) gives."""
    analyzer = Analyzer(stem=stem, stopwords=stopwords)
    latin = (
        "The Running parsers don't fail: my_var, foo.bar-baz v3.14 e-mail O’Neil's "
        "snake_case_name 42 x86_64 ﬁle Ｆｕｌｌ the and of"
    )
    mixed = analyzer.terms(latin + " 中文")
    tail = analyzer.terms("中文")
    assert mixed[-len(tail) :] == tail
    assert analyzer.terms(latin) == mixed[: -len(tail)]
    assert "my_var" in analyzer.terms(latin)  # compounds still go through their own path


def test_keyword_counts_weights_fields():
    """Title twice, heading and body once, in first-seen order (the packed forward index
    keeps this order)."""
    from kbcli.text.analysis import keyword_counts

    counts = keyword_counts(
        Analyzer(), "reset the password, reset it", {"title": "Password", "heading": "Account"}
    )
    assert list(counts.items()) == [("password", 3), ("account", 1), ("reset", 2)]
