#!/usr/bin/env python3
"""CLIP checkpoints whose config says GELU, not OpenAI's QuickGELU (as
LAION's open_clip and Hugging Face CLIP checkpoints do), for
gpu-worker/tests/it/families.rs: the families' small shapes, seeded, each
with its config beside it as upstream publishes it:

- families/gelu/hf_clip/: model.safetensors and the config.json that
  CLIPModel.save_pretrained writes (hidden_act "gelu" in both towers);
- families/gelu/open_clip/: open_clip_pytorch_model.bin and the
  open_clip_config.json the hub holds beside it (model_cfg without
  "quick_gelu", so open_clip builds nn.GELU).

families/gelu.json holds each one's L2-normalised image embeddings of the
families' images and text embeddings of make_text_vectors' token rows.

    pip install torch open_clip_torch transformers safetensors
    python3 scripts/make_family_vectors.py      # the images, first
    python3 scripts/make_gelu_vectors.py
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

from make_family_vectors import CLIP, normalised, randomise
from make_text_vectors import ids_rows

FAMILIES = os.path.join("gpu-worker", "tests", "vectors", "families")
OUT = os.path.join(FAMILIES, "gelu")


def main():
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg
    from transformers import CLIPConfig, CLIPModel

    torch.set_num_threads(1)
    reference = json.load(open(os.path.join(FAMILIES, "reference.json")))["cases"]
    ids = ids_rows()
    cases = {}

    def u8_of(name):
        side = reference[name]["side"]
        return np.fromfile(os.path.join(FAMILIES, reference[name]["images"]),
                           dtype=np.uint8).reshape(-1, 3, side, side)

    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8, hidden_act="gelu")
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                vocab_size=64, max_position_embeddings=8, eos_token_id=63, hidden_act="gelu")
    clip = randomise(CLIPModel(CLIPConfig(vision_config=vision, text_config=text, projection_dim=16)), 51)
    folder = os.path.join(OUT, "hf_clip")
    os.makedirs(folder, exist_ok=True)
    clip.save_pretrained(folder)
    assert clip.config.vision_config.hidden_act == "gelu"
    x = normalised(u8_of("hf_clip"), CLIP)
    with torch.no_grad():
        img = clip.get_image_features(pixel_values=x)
        txt = clip.get_text_features(input_ids=ids)
    cases["hf_clip"] = {"weights": "gelu/hf_clip/model.safetensors", "images": "hf_clip",
                        "image": F.normalize(getattr(img, "pooler_output", img), dim=-1).tolist(),
                        "text": F.normalize(getattr(txt, "pooler_output", txt), dim=-1).tolist()}

    model_cfg = dict(embed_dim=16,
                     vision_cfg=dict(layers=2, width=32, head_width=8, patch_size=8, image_size=32, mlp_ratio=4.0),
                     text_cfg=dict(context_length=8, vocab_size=64, width=32, heads=4, layers=1))
    model = open_clip.model.CLIP(embed_dim=16, vision_cfg=CLIPVisionCfg(**model_cfg["vision_cfg"]),
                                 text_cfg=CLIPTextCfg(**model_cfg["text_cfg"]))
    assert isinstance(model.visual.transformer.resblocks[0].mlp.gelu, torch.nn.GELU)
    randomise(model, 52)
    folder = os.path.join(OUT, "open_clip")
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(folder, "open_clip_pytorch_model.bin"))
    with open(os.path.join(folder, "open_clip_config.json"), "w") as f:
        json.dump({"model_cfg": model_cfg, "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073],
                                                              "std": [0.26862954, 0.26130258, 0.27577711]}},
                  f, indent=2)
    x = normalised(u8_of("open_clip"), CLIP)
    with torch.no_grad():
        img = model.encode_image(x)
        txt = model.encode_text(ids)
    cases["open_clip"] = {"weights": "gelu/open_clip/open_clip_pytorch_model.bin", "images": "open_clip",
                          "image": F.normalize(img, dim=-1).tolist(), "text": F.normalize(txt, dim=-1).tolist()}
    with open(os.path.join(FAMILIES, "gelu.json"), "w") as f:
        json.dump({"ids": ids.tolist(), "cases": cases}, f)
    print("wrote", len(cases), "GELU CLIP cases to", OUT)


if __name__ == "__main__":
    main()
