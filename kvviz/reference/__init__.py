"""Reference implementations kvviz is checked against (run in their own environments)."""
