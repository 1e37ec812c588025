"""Take what identifies a person, a machine or a credential out of text that will be pasted in public.

What goes (each replaced by a label that says what was there):
- the API key and every other known secret value (server.api_key, [server.env] values whose names say
  TOKEN / SECRET / PASSWORD / KEY), `--api-key X`, `api_key = "X"`, `NAME_TOKEN=X`, `Authorization: Bearer X`;
- token-looking values: hf_..., sk-..., ghp_..., JWTs, hex strings of 32+ digits, base64-like strings of 32+
  characters mixing upper case, lower case and digits;
- the model path outside its repo id (/data/models/Qwen2.5-14B -> <model-dir>/Qwen2.5-14B; an HF cache
  snapshot .../models--Qwen--Qwen2.5-14B-Instruct/snapshots/<hash> -> Qwen/Qwen2.5-14B-Instruct);
- home paths (-> ~), /home/<name> and /Users/<name> of other people, the user name and the host names;
- IPv4 and IPv6 addresses other than loopback and the unspecified address (127.0.0.1, 0.0.0.0, ::1 and ::
  say how the server binds, and identify nobody).

Plain Python, stdlib only.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from backend.settings import Settings

# Names that must never be replaced as a "user" or "host" word: they are everywhere in a vLLM log.
COMMON_WORDS = frozenset({"root", "user", "admin", "ubuntu", "vllm", "qwen", "cuda", "nvidia", "python", "torch",
                          "model", "models", "server", "test", "localhost", "home", "debian", "docker", "worker",
                          "runner", "engine", "info", "error", "warning", "main", "host", "gpu", "cpu", "none"})
SECRET_NAME = re.compile(r"(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)

_ENV_SECRET = re.compile(r"\b([A-Z][A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|"
                         r"CREDENTIALS?)[A-Z0-9_]*)([\"']?\s*[=:]\s*[\"']?)([^\s\"',;}]+)")
_API_KEY_ARG = re.compile(r"(--api-key(?:\s+|=)[\"']?)([^\s\"']+)")
_API_KEY_KV = re.compile(r"(\bapi[_-]key[\"']?\s*[=:]\s*[\"']?)([^\s\"',;}]+)", re.I)
_BEARER = re.compile(r"\b(Bearer\s+)([A-Za-z0-9._~+/=-]{4,})", re.I)
_TOKENS = (
    ("hf-token", re.compile(r"\bhf_[A-Za-z0-9]{16,}")),
    ("token", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("token", re.compile(r"\b(?:gh[pousr]_|github_pat_|glpat-|xox[abpr]-)[A-Za-z0-9_-]{16,}")),
    ("token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
)
_HEX = re.compile(r"(?<![A-Za-z0-9])[0-9a-fA-F]{32,}(?![A-Za-z0-9])")
_B64 = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+_=-]{32,}(?![A-Za-z0-9+/_=-])")
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_OTHER_HOME = re.compile(r"(?<![\w.])/(home|Users)/(?!<user>)([^/\s\"':]+)")


def _is_token_like(s: str) -> bool:
    """A random-looking run: mixed case and digits, and (with - or _) one long piece, not a model name."""
    if not (any(c.isdigit() for c in s) and any(c.islower() for c in s) and any(c.isupper() for c in s)):
        return False
    return max(len(p) for p in re.split(r"[-_]", s)) >= 24


def _ipv4(m: re.Match[str]) -> str:
    parts = [int(x) for x in m.groups()]
    if any(p > 255 for p in parts) or parts[0] == 127 or parts == [0, 0, 0, 0]:
        return m.group(0)
    return "<ip>"


def _ipv6(m: re.Match[str]) -> str:
    s = m.group(0)
    groups = [g for g in s.split(":") if g]
    if not groups or s in ("::", "::1") or ("::" not in s and s.count(":") != 7):
        return s
    if s.endswith(":") and not s.endswith("::"):  # "a:b:" is a label followed by text, not an address
        return s
    return "<ip>"


def model_label(model: str) -> str | None:
    """What a local model path becomes in a report (None: a repo id, kept as it is)."""
    if not model or not (model.startswith(("/", "~", "./", "../")) or Path(model).is_absolute()):
        return None
    m = re.search(r"models--([^/]+?)--([^/]+)", model)
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    return f"<model-dir>/{Path(model.rstrip('/')).name}"


class Redactor:
    """Callable: text in, redacted text out. `counts` says how many of each kind it replaced."""

    def __init__(self, *, home: str | None = None, user: str | None = None, hosts: Iterable[str] = (),
                 secrets: Iterable[str] = (), model: str | None = None) -> None:
        self.home = (home or "").rstrip("/")
        self.user = user if user and len(user) >= 2 and user.lower() not in COMMON_WORDS else None
        self.hosts = sorted({h for h in hosts if h and len(h) >= 2 and h.lower() not in COMMON_WORDS},
                            key=len, reverse=True)
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
        self.model = model
        self.model_as = model_label(model or "")
        self._model_variants = sorted({v.rstrip("/") for v in (model or "", os.path.expanduser(model or "")) if v},
                                      key=len, reverse=True)
        self.counts: Counter[str] = Counter()
        names = [re.escape(n) for n in ([self.user] if self.user else []) + self.hosts]
        self._names = re.compile(r"(?<![\w-])(" + "|".join(names) + r")(?![\w-])", re.I) if names else None
        self._user_re = re.compile(r"(?<![\w-])" + re.escape(self.user) + r"(?![\w-])", re.I) if self.user else None

    @classmethod
    def for_settings(cls, settings: Settings, extra_secrets: Iterable[str] = ()) -> Redactor:
        """This machine's home, user and host names, and the settings' key, secret env values and model."""
        secrets = list(extra_secrets)
        key = getattr(settings, "api_key", None) or settings.server_cfg.api_key  # key file/env too
        if key:
            secrets.append(str(key))
        env = dict(os.environ, **settings.env)
        secrets += [str(v) for k, v in env.items() if SECRET_NAME.search(k) and v]
        try:
            user = getpass.getuser()
        except Exception:  # noqa: BLE001 - no passwd entry in some containers
            user = os.environ.get("USER") or ""
        hosts = {socket.gethostname()}
        try:
            hosts.add(socket.getfqdn())
        except OSError:
            pass
        hosts |= {h.split(".")[0] for h in list(hosts)}
        return cls(home=str(Path.home()), user=user, hosts=hosts, secrets=secrets,
                   model=str(settings.server_cfg.model or ""))

    def _sub(self, kind: str, pattern: re.Pattern[str], repl: Any, text: str) -> str:
        def counted(m: re.Match[str]) -> str:
            new = repl(m) if callable(repl) else m.expand(repl)
            if new != m.group(0):
                self.counts[kind] += 1
            return new

        return pattern.sub(counted, text)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for s in self.secrets:
            if s in text:
                self.counts["secret"] += text.count(s)
                text = text.replace(s, "<secret>")
        text = self._sub("api-key", _API_KEY_ARG, r"\1<api-key>", text)
        text = self._sub("api-key", _API_KEY_KV, r"\1<api-key>", text)
        text = self._sub("secret", _ENV_SECRET, r"\1\2<secret>", text)
        text = self._sub("token", _BEARER, r"\1<token>", text)
        for kind, pattern in _TOKENS:
            text = self._sub(kind, pattern, f"<{kind}>", text)
        if self.model_as:
            for variant in self._model_variants:
                if variant in text:
                    self.counts["model-path"] += text.count(variant)
                    text = text.replace(variant, self.model_as)
        text = self._sub("hex", _HEX, "<hex>", text)
        text = self._sub("token", _B64, lambda m: "<token>" if _is_token_like(m.group(0)) else m.group(0), text)
        if self.home and len(self.home) > 1:
            text = self._sub("home", re.compile(re.escape(self.home) + r"(?=[/\s\"':,)\]]|$)"), "~", text)
        text = self._sub("home", _OTHER_HOME, r"/\1/<user>", text)
        text = self._sub("ip", _IPV4, _ipv4, text)
        text = self._sub("ip", _IPV6, _ipv6, text)
        if self._names is not None:
            text = self._sub("name", self._names,
                             lambda m: "<user>" if self._user_re and self._user_re.fullmatch(m.group(0)) else "<host>",
                             text)
        return text

    def walk(self, obj: Any) -> Any:
        """The same structure with every string (keys too) redacted."""
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, dict):
            return {self(k) if isinstance(k, str) else k: self.walk(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.walk(v) for v in obj]
        return obj

    def summary(self) -> str:
        if not self.counts:
            return "nothing needed redacting"
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
