"""backend/demo.py's model: a tokenizer whose every id decodes to whole, printable text (random weights
pick any id), head_dim 128, the vocab the weights have, and an older version's folder regenerated away."""

from __future__ import annotations

import json

import pytest

from backend import demo


def test_every_id_decodes_to_whole_printable_text_and_the_weights_match_the_vocab(qhome):
    old = demo.model_dir().parent / "demo-qwen2-tiny-v2"  # a byte-level tokenizer's model, cached before
    old.mkdir(parents=True)
    (old / "model.safetensors").write_bytes(b"old")
    folder = demo.ensure_model()
    assert not old.exists(), "an older demo model is not kept beside the new one"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["head_dim"] == 128 and cfg["vocab_size"] % 64 == 0
    # as vLLM loads it: transformers 5 rebuilds a Qwen2 tokenizer's pipeline from its vocab and merges
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) == cfg["vocab_size"], "every embedding row is an id of the tokenizer"
    for i in range(cfg["vocab_size"]):
        text = tok.decode([i])
        assert text and "\ufffd" not in text and all(c.isprintable() or c in "\n\t" for c in text), (i, text)
    ids = tok.encode("Hello, the server! é")
    assert tok.decode(ids) == "Hello, the server! ", "ASCII round-trips; what is not ASCII is left out"


def test_the_demo_lists_demo_sized_profiles_that_fit_and_says_what_bounds_the_longest_length(qhome):
    from backend.ledger.preview import longest_len_text
    from backend.profiles import verdicts
    from backend.settings import load

    settings = load(demo=True, overrides=["planner.device=cpu"])
    assert set(settings.profiles) == set(demo.PROFILES)
    found = verdicts(settings, None, "0.11.0")
    assert found and all(v.fits for v in found), [(v.name, v.error, v.problems) for v in found]
    long = next(v for v in found if v.name == "long")
    assert long.max_model_len == 4096 and long.max_model_len_that_fits == 4096
    assert long.kv_cache_tokens > 4096  # memory holds more: the 4,096 is the model's limit, and is said so
    assert "the model's limit" in longest_len_text(long.max_model_len_that_fits, long.kv_cache_tokens)
    assert longest_len_text(3000, 3000) == "largest max_model_len that fits in memory 3,000"
    assert longest_len_text(None, 10) == "largest max_model_len unknown"
    assert load(overrides=["planner.device=cpu"]).profiles["long"]["max_model_len"] == 32768  # not without --demo
