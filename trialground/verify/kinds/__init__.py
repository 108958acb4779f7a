"""Verifier kinds: the registry and one module per built-in kind."""
