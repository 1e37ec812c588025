"""serve's part in issue 26: adopt a dead supervisor's proved server, or say it is orphaned; and
the plan beside the teammates' servers (backend/beside.py)."""

from __future__ import annotations

import sys
from typing import Any

from backend.server import statefile
from backend.settings import Settings


def _err(msg: str) -> None:
    print(f"qwen-tui: {msg}", file=sys.stderr)


def _adoption() -> tuple[dict[str, Any] | None, int | None]:
    """A dead supervisor's server that still runs: (its state, None) when backend.server.adopt proves it
    is this state dir's, (None, 1) when it cannot (said, with the fix), (None, None) when none runs."""
    from backend.server import adopt  # start-up: a subcommand imports only what it runs

    data, _ = statefile.read_checked()
    proof = adopt.prove(data)
    if proof is None:
        return None, None
    if proof.ok:
        _err(f"adopting the server of a dead supervisor: pid {proof.pid}, port {proof.port} "
             f"({'; '.join(proof.facts)})")
        return data, None
    _err(f"{proof.orphaned_text()}; fix: {proof.fix()}")
    return None, 1


def _beside(settings: Settings, servers: list[Any], version: str | None = None) -> Any:
    """backend.beside's verdict for this plan beside the teammates' servers (None when none runs)."""
    if not servers:
        return None
    # start-up: a subcommand imports only what it runs
    from backend.beside import check
    from backend.ledger import LedgerInputError, plan_from_settings

    try:
        led = plan_from_settings(settings, vllm_version=version)
    except LedgerInputError:
        return None
    if led.device == "cpu":
        return check(led, servers)
    from backend.gpu import GpuMonitor  # start-up: a subcommand imports only what it runs

    mon = GpuMonitor()
    try:
        return check(led, servers, mon)
    finally:
        mon.shutdown()


def plan_beside(settings: Settings, as_json: bool, run_plan: Any, scan: Any) -> int:
    """`qwen-tui plan`, plus the verdict beside the teammates' servers ("Beside: ..." in the text,
    "beside" in the JSON); exit 1 when the plan does not fit in what they leave free."""
    import io  # start-up: a subcommand imports only what it runs
    import json  # start-up: a subcommand imports only what it runs

    out = io.StringIO()
    rc = run_plan(settings, as_json, out=out)
    servers = scan(settings).servers if rc != 2 else []
    fit = _beside(settings, servers)  # what is free now, beside the teammates' servers
    text = out.getvalue()
    if as_json and fit is not None:
        data = json.loads(text)
        data["beside"] = dict(fit.to_dict(), servers=[t.to_dict() for t in servers])
        text = json.dumps(data, indent=2) + "\n"
    elif fit is not None:
        text += f"Beside: {fit.text}\n"
    sys.stdout.write(text)
    return 1 if fit is not None and not fit.fits and rc == 0 else rc
