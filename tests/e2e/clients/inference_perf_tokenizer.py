"""Builds the tokenizer inference-perf counts and generates prompts with, offline.

inference-perf loads a Hugging Face tokenizer (`tokenizer.pretrained_model_name_or_path`), by
default the served model's from the Hub, which these machines cannot reach. A directory saved
by `save_pretrained` loads the same way, so this trains a small byte-level BPE (4,096 tokens,
like GPT-2's scheme, on the Shakespeare text inference-perf ships) and saves it there. The
simulated pods count tokens their own way; what matters to the tests is that prompts with a
shared prefix share their leading text, which any tokenizer gives.

Usage: inference_perf_tokenizer.py OUT_DIR   (run by `make e2e` with .venv-inference-perf)
"""

import os
import sys

import inference_perf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

VOCABULARY = 4096


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    corpus = os.path.join(os.path.dirname(inference_perf.__file__), "assets", "shakespeare.txt")
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCABULARY,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([corpus], trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=32768
    )
    wrapped.save_pretrained(sys.argv[1])
    print(f"tokenizer ({len(wrapped)} tokens) saved in {sys.argv[1]}")


if __name__ == "__main__":
    main()
