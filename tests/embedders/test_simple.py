import math

import pytest

from kbcli import SimpleEmbedder, cosine_similarity, simple_embedding


def test_simple_embedding_formula_by_hand():
    vec = simple_embedding("Ab", dim=64)
    raw = [0.0] * 64
    raw[ord("a") % 64] += 1.0
    raw[ord("b") % 64] += 1.0 / 1.01
    norm = math.sqrt(sum(v * v for v in raw))
    assert vec == pytest.approx([v / norm for v in raw])
    assert math.isclose(sum(v * v for v in vec), 1.0)


def test_simple_embedding_empty_is_zero_vector():
    assert simple_embedding("", dim=8) == [0.0] * 8


def test_cosine_similarity_edge_cases():
    assert cosine_similarity([], [1.0]) == 0.0
    assert cosine_similarity([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine_similarity([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    assert cosine_similarity([1.0, 0.0], [-1.0, 0.0]) == pytest.approx(-1.0)


def test_simple_embedder_batches_and_info():
    emb = SimpleEmbedder(dim=16)
    vecs = emb.embed_documents(["hello", "world"])
    assert vecs[0] == simple_embedding("hello", 16) and len(vecs[1]) == 16
    assert emb.embed_query("hello") == vecs[0]
    assert (emb.info.provider, emb.info.dimension) == ("simple", 16)
    with pytest.raises(ValueError):
        SimpleEmbedder(dim=0)


def test_batch_path_is_bit_identical_to_the_reference_formula():
    import random

    rng = random.Random(3)
    alphabet = "abcXYZ 0123中文ΩЖé\U0001f600\n\t."
    texts = ["", "A", "Hello World"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 2000))) for _ in range(40)
    ]
    for dim in (7, 64, 384):
        assert SimpleEmbedder(dim).embed_documents(texts) == [
            simple_embedding(t, dim) for t in texts
        ]
