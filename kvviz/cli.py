"""`kvviz` / `python -m kvviz`: dispatch to kvviz/commands/<name>.py."""
from __future__ import annotations

import argparse
import importlib
import sys

from kvviz.errors import KvvizError

# command name -> module under kvviz.commands
COMMANDS = {
    "simulate": "simulate",
    "bench": "bench",
    "collect": "collect",
    "info": "info",
    "export": "export",
    "scrape": "scrape",
    "torch-snapshot": "torch_snapshot",
    "events": "events",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep its format
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="kvviz", description="KV-cache fragmentation observatory")
    from kvviz import __version__

    parser.add_argument("--version", action="version", version=f"kvviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, mod_name in COMMANDS.items():
        if only is not None and name != only:
            # other commands get a cheap placeholder so `kvviz --help` lists them
            sub.add_parser(name, help="")
            continue
        try:
            mod = importlib.import_module(f"kvviz.commands.{mod_name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kvviz.commands"):
                continue  # command not built yet
            raise
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (KvvizError, ValueError, FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        print(f"kvviz {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
