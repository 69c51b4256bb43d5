#!/usr/bin/env python3
"""References for the text towers (gpu-worker/tests/it/text.rs): each upstream
text tower on token ids, on the small seeded checkpoints that
make_family_vectors.py saved (vocabulary 64, context 8), loaded back the
way users load them:
- open_clip: CLIP.encode_text (causal, argmax pooling, text_projection);
- HF CLIPModel.get_text_features (eos_token_id set to the vocabulary's last
  id, as the real vocabulary's end-of-text token is);
- HF SiglipModel.get_text_features (last token, head).
Each row of ids holds the highest id once, at varying positions, and is
padded with 0 after it, as open_clip's tokenizer pads. The outputs are
L2-normalised, as the tool's embeddings are.

    pip install torch open_clip_torch transformers safetensors
    python3 scripts/make_family_vectors.py   # the checkpoints, first
    python3 scripts/make_text_vectors.py
"""
import json
import os
import shutil
import tempfile

import torch
import torch.nn.functional as F

FAMILIES = os.path.join("gpu-worker", "tests", "vectors", "families")
OUT = os.path.join("gpu-worker", "tests", "vectors", "text")


def ids_rows():
    g = torch.Generator().manual_seed(21)
    rows = []
    for end in [1, 3, 5, 7, 2]:
        body = torch.randint(1, 63, (end - 1,), generator=g).tolist()
        rows.append([62] + body + [63] + [0] * (8 - end - 1))
    return torch.tensor(rows)


def main():
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg
    from transformers import CLIPConfig, CLIPModel, SiglipConfig, SiglipModel

    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    ids = ids_rows()
    cases = {}

    model = open_clip.model.CLIP(
        embed_dim=16,
        vision_cfg=CLIPVisionCfg(layers=2, width=32, head_width=8, patch_size=8, image_size=32, mlp_ratio=4.0),
        text_cfg=CLIPTextCfg(context_length=8, vocab_size=64, width=32, heads=4, layers=1),
        quick_gelu=True,
    )
    model.load_state_dict(torch.load(os.path.join(FAMILIES, "open_clip_pytorch_model.bin")))
    model.eval()
    with torch.no_grad():
        emb = F.normalize(model.encode_text(ids), dim=-1)
    cases["open_clip"] = {"files": ["open_clip_pytorch_model.bin", "open_clip_model.safetensors",
                                    "clip_text_only.safetensors"],
                          "family": "clip", "activation": "quick_gelu", "embedding": emb.tolist()}

    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                vocab_size=64, max_position_embeddings=8, eos_token_id=63)

    def hf_load(cls, config, folder):
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            shutil.copy(os.path.join(FAMILIES, folder, "model.safetensors"), tmp)
            return cls.from_pretrained(tmp).eval()

    clip = hf_load(CLIPModel, CLIPConfig(vision_config=vision, text_config=text, projection_dim=16), "hf_clip")
    with torch.no_grad():
        out = clip.get_text_features(input_ids=ids)
        emb = F.normalize(getattr(out, "pooler_output", out), dim=-1)
    cases["hf_clip"] = {"files": ["hf_clip/model.safetensors", "hf_clip_bin/pytorch_model.bin"],
                        "family": "clip", "activation": clip.config.text_config.hidden_act,
                        "embedding": emb.tolist()}

    siglip = hf_load(SiglipModel, SiglipConfig(vision_config=vision, text_config=text), "hf_siglip")
    with torch.no_grad():
        out = siglip.get_text_features(input_ids=ids)
        emb = F.normalize(getattr(out, "pooler_output", out), dim=-1)
    cases["hf_siglip"] = {"files": ["hf_siglip/model.safetensors", "hf_siglip_bin/pytorch_model.bin"],
                          "family": "siglip", "activation": siglip.config.text_config.hidden_act,
                          "embedding": emb.tolist()}

    import transformers
    versions = {"torch": torch.__version__, "open_clip": open_clip.__version__,
                "transformers": transformers.__version__}
    with open(os.path.join(OUT, "towers.json"), "w") as f:
        json.dump({"versions": versions, "ids": ids.tolist(), "cases": cases}, f)
    print("wrote", len(cases), "text tower cases to", OUT)


if __name__ == "__main__":
    main()
