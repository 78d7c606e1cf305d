"""Chunkers: docs by heading, code by tree-sitter symbol, issues by thread."""
