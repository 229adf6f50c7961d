"""The static layer: Python AST analysis.  Never imports torch, never runs user code."""
