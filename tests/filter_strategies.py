"""Hypothesis strategies for filters (tests/filters/test_fuzz.py,
tests/filters/test_differential.py): hostile keys and values, raw objects shaped like filters
(valid or not), valid filters, metadata corpora, and a table of known cases. ``KB_STRESS=1``
multiplies the number of examples (:func:`examples`)."""

from __future__ import annotations

import os

from hypothesis import strategies as st

from kbcli.filters.model import KEY_OPERATORS, LOGICAL_OPERATORS

STRESS = os.environ.get("KB_STRESS") == "1"


def examples(n: int) -> int:
    """``n`` examples in CI, 20 times as many under ``KB_STRESS=1``."""
    return n * 20 if STRESS else n


ODD_KEYS = [
    "a", "'", '"', 'a"b', "\\", '\\"', "\x00", "a\x00b", "\x1f", "\x7f", "\u2019", "\u201c",
    "\u02bc", "\uff07", "x" * 10240, "$", "$$", "$.a", "$[0]", "a.b", "a[0]", "a[#-1]", "->",
    "->>", "#>", "@>", "?", "%s", "%(x)s", "{}", "--", "/*", "*/", ";", "AND", "OR 1=1",
    "' OR '1'='1", "a'); DROP TABLE chunks; --", "é", "e\u0301", "\u202e", "日本", " ", "\t",
    "\udcff", "\ud800", "\U0001f600",
]  # fmt: skip
ODD_TEXT = [*ODD_KEYS, "", "%", "_", "a%", "1", "true", "null", "2024", "1e999"]
OPERATORS = [*KEY_OPERATORS, *LOGICAL_OPERATORS, "$not", "$like", "$regex", "$EQ", "$", "$in "]

odd_text = st.one_of(
    st.sampled_from(ODD_TEXT),
    st.text(max_size=20),
    st.text("'\"\\$.[]%_ ;-"),
    st.text(st.characters(categories=("Cs", "Pi", "Pf", "Cc")), max_size=4),  # surrogates
)
huge_ints = st.one_of(
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**400, -(10**400)]),
)
scalars = st.one_of(
    st.none(), st.booleans(), huge_ints, st.floats(), odd_text, st.sampled_from([-0.0, 1e308])
)
keys = st.one_of(odd_text, st.sampled_from(OPERATORS))


def _raw_children(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(st.sampled_from(OPERATORS), children, max_size=3),
        st.dictionaries(st.one_of(st.integers(), st.none(), st.booleans()), children, max_size=2),
    )


# Anything JSON-like (and a bit beyond: tuples, non-string keys): most of it is no filter.
_anything = st.recursive(scalars, _raw_children, max_leaves=25)


@st.composite
def _near_condition(draw: st.DrawFn) -> dict:
    op = draw(
        st.sampled_from(KEY_OPERATORS) if draw(st.integers(0, 4)) else st.sampled_from(OPERATORS)
    )
    if op in ("$in", "$nin", "$and", "$or"):
        return {op: draw(st.lists(scalars, max_size=4))}
    if op == "$exists" and draw(st.booleans()):
        return {op: draw(st.booleans())}
    return {op: draw(st.one_of(scalars, _anything) if not draw(st.integers(0, 4)) else scalars)}


@st.composite
def _near_leaf(draw: st.DrawFn) -> dict:
    key = draw(odd_text if draw(st.integers(0, 4)) else keys)
    if draw(st.booleans()):
        return {key: draw(scalars)}
    ops: dict = {}
    for cond in draw(st.lists(_near_condition(), max_size=3)):
        ops.update(cond)
    return {key: ops}


def _near_logical(children: st.SearchStrategy) -> st.SearchStrategy:
    logical = st.one_of(st.sampled_from(LOGICAL_OPERATORS), st.sampled_from(OPERATORS))
    return st.one_of(
        st.builds(lambda op, subs: {op: subs}, logical, st.lists(children, max_size=3)),
        st.builds(lambda a, b: {**a, **b}, children, children),
    )


# Filters with a filter's shape but hostile keys, operators and operands (many are valid),
# and anything at all.
_near = st.recursive(_near_leaf(), _near_logical, max_leaves=8)
raw_filters = st.one_of(_near, _near, _near, _anything)

# --- valid filters -------------------------------------------------------------------------

_KEY_POOL = st.one_of(
    st.sampled_from(["n", "x"]),
    st.sampled_from(["n", "x"]),
    st.sampled_from(["s", "a.b", "[0]", "it's", "ünï", "b\\s"]),
)
valid_keys = st.one_of(
    _KEY_POOL,
    _KEY_POOL,
    _KEY_POOL,
    st.text(min_size=1, max_size=12).filter(
        lambda k: not k.startswith("$") and '"' not in k and all(ord(c) >= 32 for c in k)
    ),
)
# Mostly a small pool, so that filters and corpora meet (equal values, bool against number,
# int against float, text against number); now and then anything in range.
_SMALL = st.sampled_from(
    [None, True, False, 0, 1, 2, -1, 0.0, 1.0, 2.5, -0.0, "", "a", "b", "ab", "A", "1", "é",
     "e\u0301", "%", "_", "/docs/a", "/docs/a/x", 2**63 - 1, -(2**63)]
)  # fmt: skip
_finite_ints = st.integers(-(2**63), 2**63 - 1)
_finite_floats = st.floats(allow_nan=False, allow_infinity=False)
_texts = st.one_of(
    st.sampled_from(["", "a", "b", "ab", "A", "é", "e\u0301", "%", "_", "/docs/a", "/docs/a/x"]),
    st.text(max_size=8),
).filter(lambda t: "\0" not in t)
valid_scalars = st.one_of(
    _SMALL, _SMALL, _SMALL, _SMALL, st.none(), _finite_ints, _finite_floats, _texts
)
_ordered = st.one_of(_SMALL, _SMALL, _finite_ints, _finite_floats, _texts).filter(
    lambda v: v is not None and not isinstance(v, bool)
)


@st.composite
def _condition(draw: st.DrawFn, pools: tuple) -> dict:
    scalars, ordered, texts = pools
    op = draw(st.sampled_from(KEY_OPERATORS))
    if op in ("$in", "$nin"):
        operand = draw(st.lists(scalars, min_size=1, max_size=4))
    elif op == "$exists":
        operand = draw(st.booleans())
    elif op == "$prefix":
        text = draw(texts)
        operand = text[: draw(st.integers(1, len(text)))]
    elif op in ("$gt", "$gte", "$lt", "$lte"):
        operand = draw(ordered)
    else:
        operand = draw(scalars)
    return {op: operand}


@st.composite
def _leaf(draw: st.DrawFn, keys: st.SearchStrategy, pools: tuple) -> dict:
    key = draw(keys)
    if draw(st.booleans()):
        return {key: draw(pools[0])}
    ops: dict = {}
    for cond in draw(st.lists(_condition(pools), min_size=1, max_size=3)):
        ops.update(cond)
    return {key: ops}


def _logical(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(
            lambda op, subs: {op: subs},
            st.sampled_from(LOGICAL_OPERATORS),
            st.lists(children, min_size=1, max_size=3),
        ),  # fmt: skip
        st.builds(lambda a, b: {**a, **b}, children, children),
    )


_POOLS = (valid_scalars, _ordered, _texts.filter(bool))


def filters(keys: st.SearchStrategy = valid_keys, pools: tuple = _POOLS) -> st.SearchStrategy:
    """Valid filters over ``keys``; operands from ``pools`` (any scalar, orderable, non-empty
    text): every operator, nested ``$and``/``$or``."""
    return st.recursive(_leaf(keys, pools), _logical, max_leaves=8)


valid_filters = filters()

# --- corpora -------------------------------------------------------------------------------

_TYPED = st.sampled_from(
    [True, False, None, 0, 1, 1.0, -0.0, 2.5, "1", "a", "ab", "A", "", "é", "/docs/a/x"]
)
meta_values = st.one_of(
    _TYPED,
    _TYPED,
    _TYPED,
    valid_scalars,
    st.sampled_from([2**64, -(2**70), 1e300]),  # beyond what filters can name
    st.lists(valid_scalars, max_size=2),
    st.dictionaries(st.sampled_from(["n", "x"]), valid_scalars, max_size=2),
)
metadata = st.dictionaries(
    _KEY_POOL,
    meta_values,
    max_size=5,
)
corpora = st.lists(metadata, min_size=1, max_size=12)
# SQLite's JSON keeps NUL characters in text (PostgreSQL's jsonb refuses them)
with_nul = st.dictionaries(_KEY_POOL, st.one_of(meta_values, st.sampled_from(["a\x00b", "a\x00"])))
sqlite_corpora = st.lists(st.one_of(metadata, with_nul), min_size=1, max_size=12)

# --- the command-line syntax ---------------------------------------------------------------

_fragments = st.sampled_from(
    ["=", "!=", ">", ">=", "<", "<=", ",", " ", "a", "year", "2024", "-1", "1.5", "1e999",
     "9" * 30, "true", "null", '"', "'", "\x00", "\n", "é", "$in", "{", "}", "--", ";"]
)  # fmt: skip
expressions = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(_fragments, st.text(max_size=3)), max_size=8).map("".join),
)


def _filterable(value: object) -> bool:
    if isinstance(value, str):
        return "\0" not in value
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**63
    return value is None or isinstance(value, (bool, float))


@st.composite
def corpus_and_filter(draw: st.DrawFn, docs: st.SearchStrategy = corpora) -> tuple:
    """A corpus and a filter whose keys and operands are mostly the corpus's own, so that
    documents pass and fail for every reason (type, value, missing key)."""
    corpus = draw(docs)
    keys = sorted({k for meta in corpus for k in meta}) or ["n"]
    values = [v for meta in corpus for v in meta.values() if _filterable(v)]
    ordered = [v for v in values if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    texts = [v for v in ordered if isinstance(v, str) and v]

    def mix(own: list, other: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(st.sampled_from(own), st.sampled_from(own), other) if own else other

    pools = (mix(values, valid_scalars), mix(ordered, _ordered), mix(texts, _POOLS[2]))
    return corpus, draw(filters(mix(keys, valid_keys), pools))


# --- known cases -----------------------------------------------------------------------------
# A fixed corpus and filters every compiler must agree on with the evaluator (mixed types,
# null, missing keys, LIKE wildcards and case in prefixes, a non-text source).

KNOWN_DOCS = [
    {"lang": "en", "year": 2020, "draft": True, "tags": "a"},
    {"lang": "zh", "year": 2024, "draft": False},
    {"lang": "en", "year": 2024.5, "n": None},
    {"lang": "ja", "year": "2024"},
    {"year": 1999, "page": 3},
    {"lang": "en", "page": "3"},
    {},
    {"source": "/docs/guide/a.md", "lang": "en"},
    {"source": "/docs/guide-old/b.md"},
    {"source": "/docs/g%ide/c.md", "year": 2024},
    {"source": 7},
]

KNOWN_FILTERS = [
    {"lang": "en"},
    {"lang": "en", "year": 2020},
    {"year": 2024},
    {"year": "2024"},
    {"draft": True},
    {"draft": False},
    {"n": None},
    {"lang": {"$ne": "en"}},
    {"lang": {"$in": ["zh", "ja"]}},
    {"lang": {"$nin": ["zh", "ja"]}},
    {"year": {"$gt": 2020}},
    {"year": {"$gte": 2020, "$lt": 2024.5}},
    {"year": {"$lte": "2024"}},
    {"page": {"$in": [3, "3"]}},
    {"draft": {"$exists": True}},
    {"lang": {"$exists": False}},
    {"$or": [{"lang": "zh"}, {"year": {"$lt": 2000}}]},
    {"$and": [{"lang": "en"}, {"$or": [{"year": 2020}, {"page": "3"}]}]},
    {"$and": [{"lang": {"$eq": "en"}}], "year": {"$exists": True}},
    {"source": {"$prefix": "/docs/guide/"}},
    {"source": {"$prefix": "/docs/guide"}},
    {"source": {"$prefix": "/docs/g_ide/"}},
    {"source": {"$prefix": "/docs/g%"}},
    {"source": {"$prefix": "/DOCS/"}},
    {"source": {"$prefix": "7"}},
    {"$or": [{"source": {"$prefix": "/docs/guide/"}}, {"year": 2024}]},
]
