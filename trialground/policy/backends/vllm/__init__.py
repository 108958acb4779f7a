"""The vllm policy backend: vLLM in this process (vllm.py) and the weight-reload worker extension its
engines load (vllm_worker.py)."""
