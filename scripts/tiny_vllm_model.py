"""Build a tiny random Llama (no download) for the real-vLLM test tier; idempotent.

    <vllm venv>/bin/python scripts/tiny_vllm_model.py [DIR]

DIR defaults to $KVVIZ_VLLM_MODEL or ~/.cache/kvviz/tiny-llama. The weights are random (seed
0): the model talks nonsense, which is all a KV-cache test needs. vLLM serves it with
--skip-tokenizer-init, so prompts are token-id lists (no tokenizer is built). A directory
that already holds a complete model of this spec is kept as it is; prints the directory.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SPEC = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 512,
        "max_position_embeddings": 2048}
STAMP = "kvviz-tiny-model.json"


def build(out: Path) -> Path:
    stamp = out / STAMP
    if stamp.is_file() and (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        try:
            if json.loads(stamp.read_text()) == SPEC:
                return out
        except ValueError:
            pass
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**SPEC, torch_dtype="float32", bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".partial-{os.getpid()}"  # two builders at once do not collide
    model.save_pretrained(tmp, safe_serialization=True)
    for f in tmp.iterdir():
        os.replace(f, out / f.name)
    tmp.rmdir()
    stamp.write_text(json.dumps(SPEC))
    return out


def main(argv: list[str]) -> int:
    default = os.environ.get("KVVIZ_VLLM_MODEL") or str(Path.home() / ".cache/kvviz/tiny-llama")
    out = Path(argv[1] if len(argv) > 1 else default).expanduser()
    print(build(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
