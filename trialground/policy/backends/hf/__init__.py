"""The hf policy backend: transformers in this process (hf.py) or a child process (hf_process.py), the
lean Llama-family decoder (llama_decode.py)."""
