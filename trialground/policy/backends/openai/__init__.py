"""The openai policy backend: an OpenAI-compatible endpoint, for evaluation."""
