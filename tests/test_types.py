import pytest

from kbcli import Document, InvalidOptionError, SearchOptions, SearchResult


def test_search_options_defaults():
    o = SearchOptions()
    assert (o.k, o.mode, o.alpha, o.filter, o.fusion) == (5, "hybrid", 0.6, None, "weighted")
    assert o.alpha_chosen is False and SearchOptions(alpha=0.3).alpha_chosen is True


@pytest.mark.parametrize(
    "given, canonical",
    [("vector", "semantic"), ("dense", "semantic"), ("sparse", "keyword"), ("KEYWORD", "keyword")],
)
def test_mode_aliases(given, canonical):
    assert SearchOptions(mode=given).mode == canonical


def test_unknown_mode_names_valid_ones():
    with pytest.raises(ValueError) as err:
        SearchOptions(mode="fuzzy")
    assert (
        "keyword" in str(err.value) and "semantic" in str(err.value) and "hybrid" in str(err.value)
    )
    assert isinstance(err.value, InvalidOptionError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": 0},
        {"k": -1},
        {"alpha": 1.5},
        {"alpha": -0.1},
        {"fusion": "max"},
        {"source_weight": -1},
        {"source_weight": float("inf")},
        {"source_weight": float("nan")},
        {"source_weight": True},
        {"source_weight": "2"},
    ],
)
def test_invalid_options(kwargs):
    with pytest.raises(InvalidOptionError):
        SearchOptions(**kwargs)


def test_document_defaults_are_independent():
    a, b = Document("a", "x"), Document("b", "y")
    a.metadata["k"] = 1
    assert b.metadata == {}
    assert a.created_at.tzinfo is not None
    assert SearchResult(a, 0.5).score == 0.5
