"""The Hugging Face cache as vLLM reads it: where it is, and a repo's snapshot in it. Used by the
doctor's model check and by `qwen-tui pull` (which must not import the doctor, nor it the pull)."""

from __future__ import annotations

from pathlib import Path


def hf_cache_root(download_dir: str | None, env: dict[str, str], home: Path) -> Path:
    """Where vLLM looks for (and downloads) a repo id: --download-dir, else huggingface_hub's cache."""
    if download_dir:
        return Path(download_dir).expanduser()
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return Path(env[key]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else home / ".cache"
    return xdg / "huggingface" / "hub"


def snapshot(repo_dir: Path) -> Path | None:
    """A cached repo's snapshot folder: the one refs/main names, else the newest."""
    try:
        ref = (repo_dir / "refs" / "main").read_text(encoding="ascii").strip()
        if (repo_dir / "snapshots" / ref).is_dir():
            return repo_dir / "snapshots" / ref
    except OSError:
        pass
    snaps = [s for s in (repo_dir / "snapshots").glob("*") if s.is_dir()]
    return max(snaps, key=lambda s: s.stat().st_mtime) if snaps else None
