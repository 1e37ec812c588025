"""The demo default: a tiny random-weight Qwen2 model, generated locally, served by vLLM's CPU build.

Nothing is downloaded. The model has Qwen2.5's architecture and head_dim (128: vLLM's CPU attention
rejects small head dims such as 16), its own byte-level BPE over ASCII symbols only (every id whole text, so
random weights print word salad, not broken bytes), and the ChatML chat template. Weights are
written as BF16 safetensors without torch.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import tempfile
from array import array
from pathlib import Path
from typing import Any

from backend import paths

MODEL_VERSION = 3  # bump when the generated files change (an older version's folder is removed)
SERVED_NAME = "qwen-tui-demo"

CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 2,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
}

CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = [
    "vLLM serves large language models with paged attention and continuous batching.",
    "Qwen2.5-14B-Instruct in bfloat16 needs about 29.4 GB for its weights.",
    "Tensor parallel size two splits every layer across two RTX 3090 cards.",
    "The KV cache holds keys and values for every token of every running sequence.",
    "Time to first token and tokens per second are the numbers people watch.",
    "Hello! How can I help you today? The server is ready and healthy.",
    "Decode is bound by memory bandwidth: each token reads every weight once.",
    "def main():\n    print('hello, world')\n    return 0\n",
]


def settings_path() -> Path:
    """The demo's own settings file: the console's edits in --demo go here (over server_overlay()),
    not into the user's config file, which runs without --demo read."""
    return paths.state_dir() / "demo-settings.toml"


def model_dir() -> Path:
    return paths.cache_dir() / f"demo-qwen2-tiny-v{MODEL_VERSION}"


def _bf16_bytes(n: int, rng: random.Random, std: float = 0.02, fill: float | None = None) -> bytes:
    values = array("f", [fill] * n) if fill is not None else array("f", (rng.gauss(0.0, std) for _ in range(n)))
    if array("f").itemsize != 4:  # pragma: no cover
        raise RuntimeError("unexpected float size")
    raw = values.tobytes()  # little-endian float32 on every platform vLLM runs on
    out = bytearray(n * 2)
    out[0::2] = raw[2::4]  # bf16 = the top half of float32 (truncation)
    out[1::2] = raw[3::4]
    return bytes(out)


def _tensors(cfg: dict[str, Any], vocab: int) -> list[tuple[str, list[int], str]]:
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    d = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    specs = [("model.embed_tokens.weight", [vocab, h], "rand")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", [h], "ones"),
            (p + "self_attn.q_proj.weight", [q, h], "rand"),
            (p + "self_attn.q_proj.bias", [q], "zeros"),
            (p + "self_attn.k_proj.weight", [kv, h], "rand"),
            (p + "self_attn.k_proj.bias", [kv], "zeros"),
            (p + "self_attn.v_proj.weight", [kv, h], "rand"),
            (p + "self_attn.v_proj.bias", [kv], "zeros"),
            (p + "self_attn.o_proj.weight", [h, q], "rand"),
            (p + "post_attention_layernorm.weight", [h], "ones"),
            (p + "mlp.gate_proj.weight", [inter, h], "rand"),
            (p + "mlp.up_proj.weight", [inter, h], "rand"),
            (p + "mlp.down_proj.weight", [h, inter], "rand"),
        ]
    specs.append(("model.norm.weight", [h], "ones"))
    return specs


def write_safetensors(path: Path, specs: list[tuple[str, list[int], str]], seed: int = 0) -> None:
    rng = random.Random(seed)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, shape, kind in specs:
        n = 1
        for s in shape:
            n *= s
        fill = {"ones": 1.0, "zeros": 0.0}.get(kind)
        blob = _bf16_bytes(n, rng, fill=fill)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)


# Words beside the corpus's own, trained into the tokenizer too and filling the ids up to a multiple
# of 64: random weights pick ids at random, and each is then ASCII text (mostly whole words).
VOCAB = 576
EXTRA_WORDS = (
    "the a an of to and in is it that for on with as at by from this be are was not or but all can will one "
    "more some time day way model server token cache memory batch layer weight graph prompt reply fast slow "
    "quiet ready warm cold long short new old first last next every each other same large small runs waits "
    "reads writes holds sends keeps takes gives starts stops fits grows answer question number word line "
    "queue request stream rate peak share free full empty open close start stop hello world system user "
    "assistant").split()


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's table (what tokenizers' ByteLevel uses): printable Latin-1 bytes map to themselves,
    the others to chr(256 + n) in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _train_tokenizer(out: Path) -> int:
    """A byte-level BPE (the layout Qwen2's tokenizer class reads: transformers 5 rebuilds its
    pipeline from vocab and merges) whose symbols are printable ASCII, space, tab and newline only:
    every id decodes to whole, printable text. With the 256 byte symbols (v2) random weights printed
    parts of UTF-8 characters (`LLem\ufffd returneco"\ufffd\ufffd`). Characters outside ASCII in a
    prompt are left out when it is encoded: the demo's model is random, the count is what matters.
    Returns the vocab size, filled up to a multiple of 64 with words (an embedding row without an
    id of the tokenizer would decode to nothing)."""
    # tokenizers is large: only to make the demo model, once
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    table = _byte_to_unicode()
    ascii_chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
    alphabet = sorted({table[ord(c)] for c in ascii_chars})
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # 576 ids, as the v2 model had: its weights (and every figure planned or measured from them) are the same
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet))
    words = " ".join(EXTRA_WORDS)
    tok.train_from_iterator([*CORPUS, words, words.title()] * 4, trainer=trainer)
    path = out / "tokenizer.json"
    tok.save(str(path))
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    n = len(vocab)
    fill = ("\u0120" + w for w in [*EXTRA_WORDS, *(w.title() for w in EXTRA_WORDS), *(w.upper() for w in EXTRA_WORDS)])
    for token in fill:  # ids without merges: never produced by encoding, each decodes to a word
        if n % 64 == 0:
            break
        if token not in vocab:
            vocab[token] = n
            n += 1
    path.write_text(json.dumps(data, ensure_ascii=False))
    return n


def generate(target: Path) -> Path:
    """Write the whole model folder atomically (a temp dir renamed into place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    try:
        vocab = _train_tokenizer(tmp)  # a multiple of 64 ids, each a word: no id without text
        ids = {t: SPECIAL.index(t) for t in SPECIAL}
        cfg = dict(CONFIG, vocab_size=vocab, bos_token_id=ids["<|endoftext|>"],
                   eos_token_id=ids["<|im_end|>"])
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps({
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"], "do_sample": True, "temperature": 0.7}, indent=2))
        (tmp / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": CONFIG["max_position_embeddings"],
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "unk_token": None, "chat_template": CHATML, "clean_up_tokenization_spaces": False,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}, indent=2))
        write_safetensors(tmp / "model.safetensors", _tensors(cfg, vocab))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def ensure_model() -> Path:
    target = model_dir()
    if not (target / "model.safetensors").is_file():
        generate(target)
        for old in target.parent.glob("demo-qwen2-tiny-v*"):  # an older tokenizer's model: not used again
            if old != target and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    return target


def server_overlay() -> dict[str, Any]:
    """The demo's [server] values (backend.settings.apply_demo puts them over the defaults: the
    file's server settings do not apply to the demo). Makes the demo model if it is not there yet."""
    return dict(
        model=str(ensure_model()),
        served_model_name=SERVED_NAME,
        tensor_parallel_size=1,
        dtype="bfloat16",
        max_model_len=2048,
        max_num_seqs=8,
        # On the CPU backend this is the fraction of CPU memory to reserve; vLLM's default (0.92)
        # fails on a small machine ("less than desired CPU memory utilization").
        gpu_memory_utilization=0.2,
        host="127.0.0.1",
        port=8011,
        env={},
    )


# The workload profiles in --demo, in place of the built-in (and the file's) ones, sized for the tiny
# model on the CPU: its max_position_embeddings is 4096, its KV cache a few MiB per thousand tokens.
PROFILES: dict[str, dict[str, Any]] = {
    "chat": {"description": "demo chat: 2K context, 8 sequences at once", "max_model_len": 2048,
             "max_num_seqs": 8},
    "long": {"description": "demo long: the model's whole 4K context, 2 sequences", "max_model_len": 4096,
             "max_num_seqs": 2},
    "batch": {"description": "demo batch: 1K context, 16 sequences", "max_model_len": 1024, "max_num_seqs": 16},
    # two CPU workers (one core per rank at least, bound by backend/server/cpu_bind.py) that all-reduce every
    # layer over gloo, as a 3090 pair does over PCIe: the two-worker paths, seen on a laptop (docs/tp2.md)
    "tp2": {"description": "two workers: tensor parallel 2 on vLLM's CPU build (one core per rank)",
            "tensor_parallel_size": 2},
}

# what the demo changes in the other sections (console settings are kept)
PLANNER_OVERLAY: dict[str, Any] = {"device": "cpu"}
CHAT_OVERLAY: dict[str, Any] = {"max_tokens": 64}
