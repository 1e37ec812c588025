"""`qwen-tui chat`: one streamed reply, a saved conversation continued (--conversation), and the
saved conversations listed, exported, renamed, deleted (--list, --export, --rename, --delete)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.chat.session import Reply
    from backend.chat.store import Store
    from backend.chat.stream import ChatError
    from backend.settings import Settings


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def cmd_chat(args: argparse.Namespace) -> int:
    from backend.chat.store import Store, StoreError  # start-up: a subcommand imports only what it runs
    from backend.cli.options import load_settings  # start-up: a subcommand imports only what it runs

    empty = _empty_name(args)
    if empty:
        _err(f"qwen-tui chat: {empty} needs a name, got an empty one"
             + ("" if empty == "--model" else " (an id, id prefix or title; --list shows them)"))
        return 2
    store = Store()
    try:
        if args.list:
            return _list(store, args.json)
        if args.export:
            return _export(store, args.export, args.out)
        if args.rename:
            conv_id = _resolve(store, args.rename[0])
            store.rename(conv_id, args.rename[1])
            print(f"renamed {conv_id}: {' '.join(args.rename[1].split())}")
            return 0
        if args.delete:
            conv_id = _resolve(store, args.delete)
            title = store.load(conv_id).title
            store.delete(conv_id)
            print(f"deleted {conv_id} ({title})")
            return 0
        return _send(load_settings(args), store, args)
    except StoreError as e:
        if args.json:
            _print_json({"error": str(e)})
        else:
            _err(f"qwen-tui chat: {e}")
        return 1


def _resolve(store: Store, name: str) -> str:
    from backend.chat.store import StoreError  # start-up: a subcommand imports only what it runs

    conv_id = store.resolve(name)
    if conv_id is None:
        raise StoreError(f"no saved conversation {name!r} (qwen-tui chat --list shows them)")
    return str(conv_id)


def _list(store: Store, as_json: bool) -> int:
    rows = store.list()
    if as_json:
        _print_json({"dir": str(store.root), "conversations": [s.as_dict() for s in rows]})
        return 0
    if not rows:
        print(f"no saved conversations yet (they are kept in {store.root})")
        return 0
    print(f"{'id':<21} {'updated':<16} {'msgs':>4}  {'model':<20} title")
    for s in rows:
        damaged = f"  ({s.damaged} damaged lines skipped)" if s.damaged else ""
        print(f"{s.id:<21} {_when(s.updated):<16} {s.messages:>4}  {s.model[:20]:<20} {s.title}{damaged}")
    return 0


def _export(store: Store, name: str, out: str | None) -> int:
    from backend.chat.conversation import to_markdown  # start-up: a subcommand imports only what it runs

    text = to_markdown(store.load(_resolve(store, name)))
    if out and out != "-":
        from pathlib import Path  # start-up: a subcommand imports only what it runs

        from backend.chat.store import StoreError, write_export  # start-up: as above

        target = Path(out).expanduser()
        if target.is_dir():
            _err(f"qwen-tui chat: --out {out} is a directory: give a file name")
            return 2
        try:
            write_export(target, text)  # 0600, as the conversations
        except StoreError as e:
            _err(f"qwen-tui chat: {e}")
            return 1
        print(f"wrote {out}")
    else:
        sys.stdout.write(text)
    return 0


def _send(settings: Settings, store: Store, args: argparse.Namespace) -> int:
    # start-up: a subcommand imports only what it runs
    from backend.chat.conversation import ChatParams, Conversation
    from backend.chat.session import ChatSession, ContextRefused
    from backend.chat.stream import ChatError, terminal_text

    # `chat -` (as `cat -`): standard input, like no prompt at all
    prompt = " ".join(args.prompt) if args.prompt and args.prompt != ["-"] else sys.stdin.read()
    if not prompt.strip():
        _err("qwen-tui chat: nothing to send (give a prompt, or pipe one in)")
        return 2
    conv: Conversation | None = None
    if args.conversation:
        conv_id = store.resolve(args.conversation)
        if conv_id is not None:
            conv = store.load(conv_id, ChatParams.from_chat(settings.chat))
        else:  # a new conversation of that name
            conv = Conversation(params=ChatParams.from_chat(settings.chat), title=" ".join(args.conversation.split()))
    # without --conversation: one exchange, kept nowhere
    session = ChatSession(settings, conv, store if conv is not None else None)
    session.endpoint = (settings.base_url, args.model or settings.served_name)
    ceiling_of = _ceiling(settings)
    session.ceiling = ceiling_of
    max_tokens = args.max_tokens if args.max_tokens is not None else session.conversation.params.max_tokens

    def show(text: str) -> None:
        if not args.json:  # the model's own ESC, NUL or BEL never reach the terminal
            sys.stdout.write(terminal_text(text))
            sys.stdout.flush()

    async def run() -> Reply:
        try:
            return await session.send(prompt, show, max_tokens=max_tokens, drop_oldest=args.drop_oldest)
        finally:
            await session.aclose()

    try:
        reply = asyncio.run(run())
    except ContextRefused as e:
        b = e.budget
        fix = f"lower --max-tokens to {b.max_tokens_that_fit} or less" if b.max_tokens_that_fit else \
            "the message alone is too long for max_model_len: shorten it"
        if conv is not None and conv.exchanges_in_context():
            fix += ", or add --drop-oldest (the oldest exchanges are left out of the context, kept in the file)"
        return _chat_error(args, ChatError(b.refusal(), fix), code=2)  # bad input: nothing was sent
    except ChatError as e:
        return _chat_error(args, e)
    result, budget, ceiling = reply.result, reply.budget, ceiling_of()
    assert budget is not None  # a send that returned was counted
    if args.json:
        out = dict(result.as_dict(), decode_tokens_per_s_ceiling=ceiling,
                   context={"prompt_tokens": budget.prompt_tokens, "exact": budget.exact,
                            "max_model_len": budget.max_model_len, "max_tokens": max_tokens})
        if conv is not None:
            out["conversation"] = {"id": conv.id, "title": conv.title, "messages": conv.message_count(),
                                   "path": str(store.path(conv.id)) if conv.id else None}
        if reply.notes:
            out["notes"] = reply.notes
        _print_json(out)
    else:
        from backend.chat.conversation import rate_text  # start-up: a subcommand imports only what it runs

        tps = rate_text(result, ceiling)
        ttft = f"{result.ttft_s * 1000:.0f} ms" if result.ttft_s is not None else "n/a"
        saved = f"; saved in {conv.id} ({conv.message_count()} messages)" if conv is not None and conv.id else ""
        for note in reply.notes:
            _err(note)
        print(f"\n[{result.completion_tokens} tokens, TTFT {ttft}, {tps}, finish {result.finish_reason}{saved}]",
              file=sys.stderr)
    return 0


def _chat_error(args: argparse.Namespace, e: ChatError, code: int = 1) -> int:
    if args.json:
        _print_json({"error": e.message, "fix": e.fix, "status": e.status})
    else:
        _err(f"{e.message}\n  fix: {e.fix}")
    return code


class _ceiling:
    """The ledger's batch-1 decode ceiling for these settings, planned once when first asked (after
    the reply: the plan is not on the way to the first token)."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.done, self.value = settings, False, None

    def __call__(self) -> float | None:
        if not self.done:
            from backend.ledger import plan_for_console  # start-up: a subcommand imports only what it runs

            plan, _ = plan_for_console(self.settings)
            self.value, self.done = (plan.get("decode_tokens_per_s_ceiling") if plan else None), True
        return self.value


def _empty_name(args: argparse.Namespace) -> str | None:
    """The option given an empty name ("" from an unset shell variable), if any."""
    for flag, value in (("--export", args.export), ("--delete", args.delete), ("--model", args.model),
                        ("--conversation", args.conversation), ("--rename", (args.rename or ["x"])[0])):
        if value is not None and not str(value).strip():
            return flag
    return None


def chat_args(p: argparse.ArgumentParser) -> None:
    from backend.cli.options import positive_int  # the shared argparse type


    p.add_argument("prompt", nargs="*", help="the message (standard input when absent or -)")
    p.add_argument("--model", help="model name to send (default: server.served_model_name)")
    p.add_argument("--max-tokens", type=positive_int, metavar="N",
                   help="override max_tokens (chat.max_tokens, or the conversation's); 1 or more")
    p.add_argument("--conversation", metavar="NAME",
                   help="continue a saved conversation (id, id prefix or title); a new one of that title if none")
    p.add_argument("--drop-oldest", action="store_true",
                   help="with --conversation: leave the oldest exchanges out of the context when it would not fit")
    p.add_argument("--list", action="store_true", help="list the saved conversations")
    p.add_argument("--export", metavar="ID", help="print a saved conversation as Markdown")
    p.add_argument("--out", metavar="FILE", help="with --export: write to FILE")
    p.add_argument("--rename", nargs=2, metavar=("ID", "TITLE"), help="rename a saved conversation")
    p.add_argument("--delete", metavar="ID", help="delete a saved conversation")
    p.add_argument("--json", action="store_true", help="print one JSON object")
