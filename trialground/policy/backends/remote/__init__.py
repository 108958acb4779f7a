"""The remote policy backend: running vLLM-compatible inference servers as a trainable policy."""
