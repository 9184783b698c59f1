"""The package as a whole: its import graph, moved paths, module sizes and public type hints."""
