"""The remote policy backend: running vLLM-compatible inference servers as a trainable policy. Its modules
are private to this folder (an import-linter contract): the rest of the package uses only what is named
here."""

from trialground.policy.backends.remote.weight_push import TRANSPORTS

__all__ = ["TRANSPORTS"]
