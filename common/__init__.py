"""Small helpers that both apps use, each one rule in one place.

This package imports neither `watches` nor `outbox` (an import-linter contract in
pyproject.toml keeps it so), which is why both may import it.
"""
