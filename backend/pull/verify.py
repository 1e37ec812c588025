"""Is a pulled folder what vLLM needs? Checked before anyone waits minutes for vLLM to say no.

- every file the source listed is there with the size the source reported;
- every shard named in `model.safetensors.index.json` is there (with the source's size);
- each `*.safetensors` header parses and the file is as long as its header says (vLLM's
  "incomplete metadata, file not fully covered" otherwise);
- `config.json` parses, `tokenizer_config.json` and a tokenizer (`tokenizer.json`, `tokenizer.model`
  or `vocab.json`) are there;
- the parameter count summed from the headers, beside what the ledger expects for that model (its
  built-in table by repo id, else the folder's config.json). A difference over PARAMS_TOLERANCE is a
  problem for an unquantized model (packed quantized weights count differently: reported only).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.pull.progress import Listing

TOKENIZERS = ("tokenizer.json", "tokenizer.model", "vocab.json")
PARAMS_TOLERANCE = 0.005


@dataclass
class Verification:
    verified: bool
    problems: list[str] = field(default_factory=list)
    shards: int = 0
    params: int | None = None  # from the safetensors headers
    params_expected: int | None = None
    params_source: str | None = None  # where the expectation comes from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _expected_params(folder: Path, repo_id: str | None) -> tuple[int | None, str | None, bool]:
    """(count, where from, quantized) from the ledger: its table by repo id, else config.json."""
    # only when a pull runs: the hub clients are slow to import
    from backend.ledger.shapes import from_config, lookup, param_count

    shape = lookup(repo_id) if repo_id else None
    where = f"ledger table ({repo_id})" if shape is not None else None
    if shape is None:
        try:
            cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            shape, where = from_config(cfg, folder.name), "config.json"
        except (OSError, ValueError, KeyError, TypeError):
            return None, None, False
    return param_count(shape), where, shape.quant is not None


def verify(folder: Path, listing: Listing | None = None, repo_id: str | None = None) -> Verification:
    from backend.ledger.safetensors_count import count_dir  # only when a pull runs: the hub clients are slow to import

    folder = Path(folder)
    problems: list[str] = []
    sizes = {f.path: f.size for f in listing.files} if listing is not None else {}
    for rel, size in sizes.items():
        p = folder / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
        elif size is not None and p.stat().st_size != size:
            problems.append(f"{rel}: {p.stat().st_size} bytes, the source says {size}")
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except OSError:
        if "config.json: missing" not in problems:
            problems.append("config.json: missing")
    except ValueError as e:
        problems.append(f"config.json: not JSON ({e})")
    if not (folder / "tokenizer_config.json").is_file():
        problems.append("tokenizer_config.json: missing")
    if not any((folder / t).is_file() for t in TOKENIZERS):
        problems.append(f"no tokenizer: none of {', '.join(TOKENIZERS)}")
    shards: list[str] = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values()))
        except (OSError, ValueError, AttributeError) as e:
            problems.append(f"{index.name}: unreadable ({e})")
        for s in shards:
            if not (folder / s).is_file() and f"{s}: missing" not in problems:
                problems.append(f"{s}: named in {index.name} but missing")
            elif listing is not None and s not in sizes:
                problems.append(f"{s}: named in {index.name} but not in the repository's file list")
    count = count_dir(folder)
    if count is None:
        problems.append("no *.safetensors weights")
    else:
        for bad in count.bad_files:
            problems.append(f"{Path(bad).name}: safetensors header unreadable, or the file is shorter than "
                            "its header says (truncated)")
    out = Verification(False, problems, len(shards) or (len(count.files) if count else 0),
                       count.params if count else None)
    out.params_expected, out.params_source, quantized = _expected_params(folder, repo_id)
    if out.params and out.params_expected and count is not None and not count.bad_files:
        off = abs(out.params - out.params_expected) / out.params_expected
        if off > PARAMS_TOLERANCE and not quantized:
            problems.append(f"the headers hold {out.params:,} parameters, the {out.params_source} expects "
                            f"{out.params_expected:,} ({off:.1%} off)")
    out.verified = not problems
    return out
