"""A tiny randomly initialised BERT cross-encoder, built offline for the reranker tests and the
benchmark: ``BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
intermediate_size=64, num_labels=1, initializer_range=0.5)`` (with the default 0.02 every score
is about 0.50 and no order can be asserted) over a small word-level vocabulary.

Its scores mean nothing; what the tests check is the code path (tokenising pairs, batching,
logits to relevance, both runtimes agreeing).
"""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "the a an and or of to in on for with is are be it this that how do i my your you we "
    "what when where why reset password open settings security click link e mail expires "
    "hour account login sign forgot water tomatoes basil garden sun morning invoice invoices "
    "due days delivery date late fee charged page second travel policy trains flights trips "
    "approval hours book install linux windows mac update version error network vpn rotates "
    "server backup restore database key api token report quarterly revenue team office"
).split()


def build_tiny_cross_encoder(folder: Path, *, seed: int = 0) -> Path:
    """Write the model (safetensors, config.json) and a fast tokenizer into ``folder``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(WORDS)]
    vocab += letters + [f"##{c}" for c in letters] + list(".,;:!?-'\"()*#>")
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(str(folder / "vocab.txt"), model_max_length=128)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
        initializer_range=0.5,
        max_position_embeddings=128,
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
