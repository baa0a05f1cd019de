"""Write a tiny Llama, its tokenizer and a text dataset under OUTDIR, offline, for TRL's SFT script.

OUTDIR/model: a 1-layer LlamaForCausalLM (hidden size 16) with a word-level fast
tokenizer of 20 words (no download); OUTDIR/data/train.jsonl: 256 seeded lines of
12 of those words, one ``{"text": ...}`` a line, which ``--dataset_name OUTDIR/data``
loads as the ``train`` split.

Usage: make_tiny_llama.py OUTDIR
"""

import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
words = "the a cat dog sat ran on under mat log red blue big small and".split()
vocab = {word: i for i, word in enumerate(["<unk>", "<s>", "</s>", "<pad>", *words])}
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(
    tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
).save_pretrained(out / "model")
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=3,
)
LlamaForCausalLM(config).save_pretrained(out / "model")
rng = random.Random(0)
(out / "data").mkdir(parents=True, exist_ok=True)
with open(out / "data" / "train.jsonl", "w") as data:
    for _ in range(256):
        data.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(12))}) + "\n")
