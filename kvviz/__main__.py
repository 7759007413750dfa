import sys

from kvviz.commands.cli import main

sys.exit(main())
