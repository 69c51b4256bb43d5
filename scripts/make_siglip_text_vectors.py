#!/usr/bin/env python3
"""SigLIP's text side, for gpu-worker/tests/it/tokenizers.rs and families.rs:

- text/siglip/spiece.model: a SentencePiece Unigram model trained here
  with SigLIP's settings (nmt_nfkc, T5's ids: <pad> 0, </s> 1, <unk> 2, no
  <s>), 1000 pieces (the published c4-en model has 32000; the machinery
  is the same);
- text/siglip/tokenizer.json: the same model converted by transformers'
  T5 converter (legacy=False), as open_clip's SigLIP tokenizer.json is;
- text/siglip_tokens.json: on make_tokenizer_vectors.strings() and a few
  strings with SigLIP's special tokens,
  - transformers' SiglipTokenizer(spiece.model) called as SiglipProcessor
    calls it: padding="max_length", truncation=True, max_length=64;
  - open_clip's HFTokenizer(clean="canonicalize") over tokenizer.json:
    canonicalize_text, then the fast tokenizer, padded with </s> to 64;
- text/siglip/model.safetensors: a seeded SiglipModel with the families'
  small vision tower and a text tower over that vocabulary (context 64);
  text/siglip_labels.json: SiglipModel.get_text_features (L2-normalised)
  on a few texts, and zero-shot from labels through several templates
  (each class the mean of its normalised prompt embeddings, normalised
  again, as open_clip's build_zero_shot_classifier) scored as SiglipModel
  scores: sigmoid(logit_scale.exp() * img @ txt + logit_bias), on the
  families' hf_siglip.u8 images.

    pip install torch transformers sentencepiece protobuf open_clip_torch
    python3 scripts/make_family_vectors.py      # the families' images, first
    python3 scripts/make_siglip_text_vectors.py
"""
import io
import json
import math
import os
import shutil
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from make_family_vectors import randomise
from make_tokenizer_vectors import strings

OUT = os.path.join("gpu-worker", "tests", "vectors", "text")
FAMILIES = os.path.join("gpu-worker", "tests", "vectors", "families")
FOLDER = os.path.join(OUT, "siglip")
CONTEXT = 64


# Characters the training text never holds: unknown pieces, alone and in runs.
UNSEEN = ["𓀀𓀁𓀂 hieroglyphs", "a𓀀b𓀁𓀂c", "ᚠᚢᚦ runes", "ⰀⰁ ꓐꓑ", "x ᚠ y ᚢᚦ z"]


def siglip_strings():
    return strings() + UNSEEN + [
        "hi </s> there", "</s>", "<unk>", "a </s>", "  </s>  x", "</s></s>", "x<unk>y", "<unk> lead",
        "tail </s>", "</S> upper", "< /s>", "word " * 70 + "</s>", "word " * 62 + "</s> more",
        "▁hello", "a▁b", "▁", "▁ ▁", "Hello_World", "snake_case and kebab-case", "a" * 63, "b " * 63,
        "😀😀 two", "x" * 100, "don't stop", "  many   spaces\there  ", "ÀÉÎÕÜ", "ＡＢＣ_ｘｙｚ",
    ]


def corpus():
    """Python's own docstrings (one line each) and the test strings."""
    import argparse
    import collections
    import email
    import http.client
    import logging
    import pathlib
    import re
    import string
    import subprocess
    import textwrap
    import unittest
    lines = set()
    for m in (os, re, json, string, collections, textwrap, argparse, logging, pathlib, subprocess, email,
              http.client, unittest):
        for name in dir(m):
            doc = getattr(getattr(m, name), "__doc__", None)
            if isinstance(doc, str):
                lines.update(line.strip() for line in doc.splitlines() if line.strip())
    return sorted(lines) + [t for t in siglip_strings() if t not in UNSEEN] * 3


def main():
    import open_clip
    import sentencepiece as spm
    import transformers
    from open_clip.tokenizer import canonicalize_text
    from transformers import PreTrainedTokenizerFast, SiglipConfig, SiglipModel, SiglipTokenizer

    os.makedirs(FOLDER, exist_ok=True)
    model_file = os.path.join(FOLDER, "spiece.model")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=buf, vocab_size=1000, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc", num_threads=1,
        shuffle_input_sentence=False, character_coverage=0.9995, hard_vocab_limit=False)
    with open(model_file, "wb") as f:
        f.write(buf.getvalue())

    texts = siglip_strings()
    slow = SiglipTokenizer(vocab_file=model_file)
    sp_ids = slow(texts, padding="max_length", truncation=True, max_length=CONTEXT)["input_ids"]

    # open_clip built SigLIP's tokenizer.json as T5TokenizerFast(extra_ids=0,
    # legacy=False): transformers' T5 converter on the same model.
    from transformers.convert_slow_tokenizer import T5Converter
    converting = SiglipTokenizer(vocab_file=model_file)
    converting._extra_ids = 0
    converting.legacy = False
    json_file = os.path.join(FOLDER, "tokenizer.json")
    T5Converter(converting).converted().save(json_file)
    reloaded = PreTrainedTokenizerFast(tokenizer_file=json_file, eos_token="</s>", pad_token="</s>",
                                       unk_token="<unk>")
    cleaned = [canonicalize_text(t) for t in texts]
    json_ids = reloaded(cleaned, padding="max_length", truncation=True, max_length=CONTEXT)["input_ids"]

    with open(os.path.join(OUT, "siglip_tokens.json"), "w") as f:
        json.dump({"versions": {"transformers": transformers.__version__, "sentencepiece": spm.__version__,
                                "open_clip": open_clip.__version__},
                   "context": CONTEXT,
                   "cases": [{"text": t, "spiece": a, "tokenizer_json": b}
                             for t, a, b in zip(texts, sp_ids, json_ids)]},
                  f, ensure_ascii=False, indent=0)

    # The checkpoint: the families' small vision tower, a text tower over
    # the trained vocabulary.
    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=slow.vocab_size, max_position_embeddings=CONTEXT)
    model = randomise(SiglipModel(SiglipConfig(vision_config=vision, text_config=text)), 41)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(10.0))
        model.logit_bias.fill_(-2.5)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copy(os.path.join(tmp, "model.safetensors"), os.path.join(FOLDER, "model.safetensors"))

    def embed(strs):
        ids = torch.tensor(slow(strs, padding="max_length", truncation=True, max_length=CONTEXT)["input_ids"])
        with torch.no_grad():
            out = model.get_text_features(input_ids=ids)
        return F.normalize(getattr(out, "pooler_output", out), dim=-1)

    labels = ["tabby cat", 'a "golden" retriever', "car, red", "oak_tree", "café au lait"]
    templates = ["a photo of a {}.", "itap of a {}.", "a bad photo of the {}.", "a origami {}."]
    rows = []
    for label in labels:
        e = embed([t.format(label) for t in templates]).mean(dim=0)
        rows.append(F.normalize(e, dim=-1))
    classifier = torch.stack(rows)
    reference = json.load(open(os.path.join(FAMILIES, "reference.json")))["cases"]["hf_siglip"]
    side = reference["side"]
    u8 = np.fromfile(os.path.join(FAMILIES, reference["images"]), dtype=np.uint8).reshape(-1, 3, side, side)
    x = (torch.from_numpy(u8).float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        img = model.get_image_features(pixel_values=x)
        img = F.normalize(getattr(img, "pooler_output", img), dim=-1)
        probs = torch.sigmoid(img @ classifier.T * model.logit_scale.exp() + model.logit_bias)
    probe = ["a photo of a tabby cat.", "", "x" * 500, "Hello, World!"]
    with open(os.path.join(OUT, "siglip_labels.json"), "w") as f:
        json.dump({"labels": labels, "templates": templates, "probs": probs.tolist(),
                   "classifier": classifier.tolist(), "texts": probe,
                   "text_embeddings": embed(probe).tolist(), "vocab": slow.vocab_size,
                   "text_config": text}, f)
    print("wrote", len(texts), "SigLIP tokenizer cases and the labels checkpoint to", OUT)


if __name__ == "__main__":
    main()
