"""A randomly initialised ~100M-parameter causal LM for the CPU benchmarks, saved with `save_pretrained`.

    .venv/bin/python benchmarks/make_model.py --arch llama --out /tmp/bench-llama

The shape is SmolLM-135M's (30 layers, hidden 576, 9 query / 3 key-value heads, MLP 1536) with the bundled
tokenizer's 384-token vocabulary: 106M parameters, all in the transformer layers. (SmolLM's own 49k
vocabulary would add 28M tied embedding parameters and a 576 x 49152 output layer, which costs every
sampler and trainer the same.) `--arch qwen2` adds q/k/v biases, `--arch qwen3` per-head q/k norms.
`--shape tiny` is the bundled tiny model's shape instead (hidden 128, 4 layers, 4 heads, MLP 384);
`--shape qwen2.5-0.5b` is Qwen2.5-0.5B's transformer layers (hidden 896, 24 layers, 14 query / 2 key-value
heads, MLP 4864: 358M parameters), what scripts/gpu_smoke.sh trains where no model can be downloaded.
"""

from __future__ import annotations

import argparse

import torch
import transformers

from trialground.policy.tiny import tiny_model_dir

CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}
SHAPES = {
    "smollm135m": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64,
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, head_dim=64,
    ),
    "tiny": dict(
        hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, head_dim=32,
    ),
}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=sorted(CONFIGS), default="llama")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm135m")
    ap.add_argument("--layers", type=int, default=None, help="override the shape's layer count")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir())
    shape = SHAPES[args.shape] | ({} if args.layers is None else {"num_hidden_layers": args.layers})
    config = getattr(transformers, CONFIGS[args.arch])(
        vocab_size=len(tok) + 16,  # room for a default special token a model-specific tokenizer adds
        **shape,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.arch}: {n / 1e6:.1f}M parameters in {args.out}")


if __name__ == "__main__":
    main()
