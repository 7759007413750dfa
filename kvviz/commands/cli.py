"""`kvviz` / `python -m kvviz`: dispatch to kvviz/commands/<name>.py."""
from __future__ import annotations

import argparse
import os
import sys
import warnings

from kvviz.core.errors import KvvizError
from kvviz.core.safeio import printable

COMMANDS = ("simulate", "bench", "collect", "info", "export", "scrape", "torch-snapshot",
            "events", "attach", "whatif", "warm")


def command_module(name: str):
    """kvviz/commands/<name>.py, imported only when that command is built, so a command's
    heavy imports (torch, pandas, prometheus_client) cost nothing to the others."""
    if name == "simulate":
        from kvviz.commands import simulate as mod
    elif name == "bench":
        from kvviz.commands import bench as mod
    elif name == "collect":
        from kvviz.commands import collect as mod
    elif name == "info":
        from kvviz.commands import info as mod
    elif name == "export":
        from kvviz.commands import export as mod
    elif name == "scrape":
        from kvviz.commands import scrape as mod
    elif name == "torch-snapshot":
        from kvviz.commands import torch_snapshot as mod
    elif name == "events":
        from kvviz.commands import events as mod
    elif name == "attach":
        from kvviz.commands import attach as mod
    elif name == "whatif":
        from kvviz.commands import whatif as mod
    elif name == "warm":
        from kvviz.commands import warm as mod
    else:
        raise KeyError(name)
    return mod


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        """One line `kvviz CMD: error: ...` and exit 2 (`--help` shows the usage)."""
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="kvviz", description="KV-cache fragmentation observatory")
    from kvviz import __version__

    parser.add_argument("--version", action="version", version=f"kvviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if only is not None and name != only:
            # other commands get a cheap placeholder so `kvviz --help` lists them
            sub.add_parser(name, help="")
            continue
        mod = command_module(name)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help, --version, or one error line already printed
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if extra:  # argparse would name the top parser ("kvviz: error"); name the command
        prog = f"kvviz {args.command}" if getattr(args, "command", None) else "kvviz"
        print(f"{prog}: error: unrecognized arguments: {printable(' '.join(extra))}",
              file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per place, as Python shows them
        code = _run(args)
    if code == 0:  # an error line is the only line: warnings on the way to it are dropped
        for w in caught[:20]:
            print(f"kvviz {args.command}: warning: {w.category.__name__}: "
                  f"{printable(w.message)}", file=sys.stderr)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command's exit code; an error is one line `kvviz CMD: error: ...` (exit 2)."""
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # here, where a reader gone away is caught below
        return code
    except BrokenPipeError:  # `kvviz info RUN | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141  # 128 + SIGPIPE, as a tool the pipe ended would exit
    except (KvvizError, ValueError) as exc:
        print(f"kvviz {args.command}: error: {printable(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or device the user named: ENOSPC, EIO, ENAMETOOLONG ...
        name = f" {printable(exc.filename)}:" if exc.filename else ""
        reason = printable(exc.strerror or exc)
        print(f"kvviz {args.command}: error:{name} {reason}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
