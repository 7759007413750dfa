"""CLI subcommands: one module each, exporting HELP, add_arguments(parser) and run(args) -> int.

kvviz/commands/cli.py imports one only when its command is built (cli.command_module), so a
command's heavy imports (torch, pandas, prometheus_client) cost nothing to the others. A
ValueError (or any KvvizError) raised by run() is printed as `kvviz <cmd>: error: <message>`
and exits 2.
"""
