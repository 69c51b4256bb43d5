#!/usr/bin/env python3
"""What a user writes instead of `pipeline embed-text` (#30), over a file
of lines, batch 64, normalised, written as JSONL, torch on every core:
- CLIP: open_clip's tokenizer and encode_text;
- SigLIP (WEIGHTS a Hugging Face SiglipModel's model.safetensors, its
  config.json and spiece.model beside it): transformers' SiglipTokenizer
  called as SiglipProcessor calls it, and SiglipModel.get_text_features.

    python3 scripts/peer_embed_text.py WEIGHTS TEXTS.txt OUT.jsonl [THREADS] [clip|siglip]

WEIGHTS: an open_clip ViT-B-32-quickgelu state dict, or the SigLIP file
(seeded ones do: the speed does not depend on the values).
"""
import os
import json
import sys

import open_clip
import torch
import torch.nn.functional as F


def main():
    weights, texts_path, out = sys.argv[1:4]
    if len(sys.argv) > 4 and sys.argv[4] != "all":
        torch.set_num_threads(int(sys.argv[4]))
    family = sys.argv[5] if len(sys.argv) > 5 else "clip"
    if family == "siglip":
        from transformers import SiglipModel, SiglipTokenizer
        folder = os.path.dirname(os.path.abspath(weights))
        siglip = SiglipModel.from_pretrained(folder).eval()
        spiece = SiglipTokenizer(vocab_file=os.path.join(folder, "spiece.model"))

        def tokenizer(batch):
            return torch.tensor(spiece(batch, padding="max_length", truncation=True, max_length=64)["input_ids"])

        class Model:
            @staticmethod
            def encode_text(ids):
                out = siglip.get_text_features(input_ids=ids)
                return getattr(out, "pooler_output", out)
        model = Model()
    else:
        model = open_clip.create_model("ViT-B-32-quickgelu")
        model.load_state_dict(torch.load(weights, map_location="cpu"))
        model.eval()
        tokenizer = open_clip.get_tokenizer("ViT-B-32-quickgelu")
    with open(texts_path, encoding="utf-8") as f:
        texts = f.read().split("\n")
    if texts and texts[-1] == "":
        texts.pop()
    with torch.inference_mode(), open(out, "w") as f:
        for start in range(0, len(texts), 64):
            batch = texts[start:start + 64]
            emb = F.normalize(model.encode_text(tokenizer(batch)), dim=-1)
            for i, (text, e) in enumerate(zip(batch, emb.tolist())):
                f.write(json.dumps({"index": start + i, "text": text, "embedding": e}) + "\n")


if __name__ == "__main__":
    main()
