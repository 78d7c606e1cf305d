"""Sources: where documents come from (a git checkout, an issues file)."""
