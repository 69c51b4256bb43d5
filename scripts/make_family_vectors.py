#!/usr/bin/env python3
"""Checkpoints in every upstream layout, and PyTorch's outputs on them, for
the transformer and ConvNeXt parity tests (gpu-worker/tests/it/families.rs).

Each model is a small configuration of the real upstream class (torchvision,
open_clip, transformers), with seeded random weights, saved exactly as its
upstream saves it (torch.save of the state_dict, save_pretrained,
open_clip's file names). The references are the upstream forward passes:
the pre-logits features and logits of torchvision classifiers,
open_clip's encode_image, transformers' get_image_features and pooler
outputs, DINOv2's class token and patch mean; L2-normalised for CLIP and
SigLIP, as the tool's embeddings are.

DINOv2's torch-hub layout: the hub code is not on PyPI, so the same weights
are renamed to its keys (as transformers' conversion script maps them) and
the reference runs transformers' Dinov2Model with the hub's position
interpolation (scale_factor with its 0.1 offset) patched in.

    pip install torch torchvision open_clip_torch transformers safetensors
    python3 scripts/make_family_vectors.py
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join("gpu-worker", "tests", "vectors", "families")
IMAGENET = ([0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255])
CLIP = (
    [0.48145466 * 255, 0.4578275 * 255, 0.40821073 * 255],
    [0.26862954 * 255, 0.26130258 * 255, 0.27577711 * 255],
)
HALF = ([127.5] * 3, [127.5] * 3)


def randomise(model, seed):
    """Every float tensor drawn afresh, at a scale that keeps activations O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not t.is_floating_point() or t.dim() == 0:
                continue
            u = torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.dtype)
            leaf = name.rsplit(".", 1)[-1]
            is_norm = any(k in name for k in ("norm", "ln_", "ln.", "layrnorm", "layernorm", "features.0.1", "block.2", "classifier.0")) or (
                name.startswith("features.") and name.count(".") == 2 and name.split(".")[2] == "0" and t.dim() == 1
            )
            if "layer_scale" in name or leaf in ("gamma", "lambda1"):
                v = 0.1 + 0.2 * u
            elif t.dim() == 1 and is_norm and leaf == "weight":
                v = 0.8 + 0.4 * u
            elif t.dim() == 1:
                v = (u - 0.5) * 0.2
            else:
                fan_in = int(np.prod(t.shape[1:]))
                v = (u * 2 - 1) * math.sqrt(3.0 / fan_in)
            t.copy_(v)
    model.eval()
    return model


def images(n, side, seed):
    g = np.random.default_rng(seed)
    return g.integers(0, 256, size=(n, 3, side, side), dtype=np.uint8)


def normalised(u8, norm):
    mean, std = norm
    x = torch.from_numpy(u8.astype(np.float32))
    m = torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).reshape(1, 3, 1, 1)
    return (x - m) / s


def vit_config(**kw):
    base = dict(
        patch=8, width=32, depth=2, heads=4, mlp=128, class_token=True, registers=0,
        pos_grid=4, image=32, patch_bias=True, pre_norm=False, eps=1e-6, activation="gelu",
        layer_scale=False, pooling="class", interpolation="size", projection=None,
        classes=None, normalize=False,
    )
    base.update(kw)
    return {"vit": base}


cases = {}


def case(name, config, files, norm, u8, embed, logits=None, extra=None):
    path = os.path.join(OUT, f"{name}.u8")
    u8.tofile(path)
    entry = {
        "config": config,
        "files": files,
        "mean": norm[0],
        "std": norm[1],
        "images": f"{name}.u8",
        "side": int(u8.shape[-1]),
        "embed": embed.tolist(),
    }
    if logits is not None:
        entry["logits"] = logits.tolist()
    if extra:
        entry.update(extra)
    cases[name] = entry


def torchvision_cases():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    from torchvision.models.vision_transformer import VisionTransformer

    vit = randomise(VisionTransformer(32, 8, 2, 4, 32, 128, num_classes=10), 1)
    torch.save(vit.state_dict(), os.path.join(OUT, "vit_b_tiny.pth"))
    u8 = images(2, 32, 1)
    x = normalised(u8, IMAGENET)
    feats = {}
    vit.heads.head.register_forward_hook(lambda m, i, o: feats.__setitem__("f", i[0]))
    with torch.no_grad():
        logits = vit(x)
    case("torchvision_vit", vit_config(classes=10), ["vit_b_tiny.pth"], IMAGENET, u8,
         feats["f"].numpy(), logits.numpy())

    setting = [CNBlockConfig(16, 32, 2), CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 1), CNBlockConfig(128, None, 1)]
    cnx = randomise(ConvNeXt(setting, num_classes=10), 2)
    torch.save(cnx.state_dict(), os.path.join(OUT, "convnext_tiny_small.pth"))
    u8 = images(2, 64, 2)
    x = normalised(u8, IMAGENET)
    feats = {}
    cnx.classifier[2].register_forward_hook(lambda m, i, o: feats.__setitem__("f", i[0]))
    with torch.no_grad():
        logits = cnx(x)
    config = {"convnext": {"dims": [16, 32, 64, 128], "depths": [2, 1, 1, 1], "classes": 10}}
    case("torchvision_convnext", config, ["convnext_tiny_small.pth"], IMAGENET, u8,
         feats["f"].numpy(), logits.numpy())


def open_clip_cases():
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg
    from safetensors.torch import save_file

    model = open_clip.model.CLIP(
        embed_dim=16,
        vision_cfg=CLIPVisionCfg(layers=2, width=32, head_width=8, patch_size=8, image_size=32, mlp_ratio=4.0),
        text_cfg=CLIPTextCfg(context_length=8, vocab_size=64, width=32, heads=4, layers=1),
        quick_gelu=True,
    )
    randomise(model, 3)
    sd = model.state_dict()
    torch.save(sd, os.path.join(OUT, "open_clip_pytorch_model.bin"))
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(OUT, "open_clip_model.safetensors"))
    u8 = images(2, 32, 3)
    x = normalised(u8, CLIP)
    with torch.no_grad():
        emb = F.normalize(model.encode_image(x), dim=-1)
    config = vit_config(patch_bias=False, pre_norm=True, eps=1e-5, activation="quick_gelu",
                        projection=16, normalize=True)
    case("open_clip", config, ["open_clip_pytorch_model.bin", "open_clip_model.safetensors"], CLIP, u8,
         emb.numpy())
    # A TorchScript archive like OpenAI's original ViT-B-32.pt: refused in one line.
    traced = torch.jit.trace(model.visual, x, check_trace=False)
    torch.jit.save(traced, os.path.join(OUT, "openai_torchscript.pt"))
    # A text tower alone.
    text_only = {k: v for k, v in sd.items() if not k.startswith("visual.")}
    save_file({k: v.contiguous() for k, v in text_only.items()}, os.path.join(OUT, "clip_text_only.safetensors"))


def hf_cases():
    from transformers import (CLIPConfig, CLIPModel, CLIPVisionModelWithProjection, Dinov2Config,
                              Dinov2Model, SiglipConfig, SiglipModel, SiglipVisionModel)

    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                vocab_size=64, max_position_embeddings=8)

    def save(model, folder, safe):
        """save_pretrained's model.safetensors, or the pytorch_model.bin that
        transformers 4 wrote (torch.save of the state_dict; 5 writes
        safetensors only)."""
        import tempfile

        from safetensors.torch import load_file

        path = os.path.join(OUT, folder)
        os.makedirs(path, exist_ok=True)
        if safe:
            model.save_pretrained(path)
            for extra in os.listdir(path):
                if extra.endswith(".json"):
                    os.remove(os.path.join(path, extra))
            return f"{folder}/model.safetensors"
        # The published names are what save_pretrained writes (transformers 5
        # renames some modules in memory and maps them back on save).
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            tensors = load_file(os.path.join(tmp, "model.safetensors"))
        torch.save(tensors, os.path.join(path, "pytorch_model.bin"))
        return f"{folder}/pytorch_model.bin"

    clip = randomise(CLIPModel(CLIPConfig(vision_config=vision, text_config=text, projection_dim=16)), 4)
    u8 = images(2, 32, 4)
    x = normalised(u8, CLIP)
    with torch.no_grad():
        features = clip.get_image_features(pixel_values=x)
        # transformers 5 returns an output object, 4 a tensor.
        features = getattr(features, "pooler_output", features)
        emb = F.normalize(features, dim=-1)
    files = [save(clip, "hf_clip", True), save(clip, "hf_clip_bin", False)]
    tower_config = clip.config.vision_config
    tower_config.projection_dim = 16
    tower = CLIPVisionModelWithProjection(tower_config)
    tower.load_state_dict({k: v for k, v in clip.state_dict().items()
                           if k.startswith("vision_model.") or k.startswith("visual_projection.")}, strict=False)
    tower.visual_projection.load_state_dict(clip.visual_projection.state_dict())
    tower.eval()
    with torch.no_grad():
        tower_emb = F.normalize(tower(pixel_values=x).image_embeds, dim=-1)
    assert torch.allclose(tower_emb, emb, atol=1e-6)
    files.append(save(tower, "hf_clip_vision", True))
    config = vit_config(patch_bias=False, pre_norm=True, eps=1e-5, activation="quick_gelu",
                        projection=16, normalize=True)
    case("hf_clip", config, files, CLIP, u8, emb.numpy())

    siglip = randomise(SiglipModel(SiglipConfig(vision_config=vision, text_config=text)), 5)
    u8 = images(2, 32, 5)
    x = normalised(u8, HALF)
    with torch.no_grad():
        out = siglip.vision_model(pixel_values=x).pooler_output
        emb = F.normalize(out, dim=-1)
    files = [save(siglip, "hf_siglip", True)]
    # transformers 5 saves a SiglipVisionModel without the vision_model. prefix.
    tower = SiglipVisionModel(siglip.config.vision_config)
    tower.load_state_dict(siglip.vision_model.state_dict())
    tower.eval()
    with torch.no_grad():
        assert torch.allclose(tower(pixel_values=x).pooler_output, out, atol=1e-6)
    files += [save(siglip, "hf_siglip_bin", False), save(tower, "hf_siglip_vision", True)]
    config = vit_config(class_token=False, activation="gelu_tanh", pooling="map", normalize=True)
    case("hf_siglip", config, files, HALF, u8, emb.numpy())

    # DINOv2 trained at 64 px (8×8 grid), run at 32 px (4×4): the position
    # embeddings are resampled, as at 518 → 224 for the real models.
    dino = randomise(Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              mlp_ratio=4, patch_size=8, image_size=64)), 6)
    u8 = images(2, 32, 6)
    x = normalised(u8, IMAGENET)
    with torch.no_grad():
        hidden = dino(pixel_values=x).last_hidden_state
    cls, mean = hidden[:, 0], hidden[:, 1:].mean(dim=1)
    files = [save(dino, "hf_dinov2", True), save(dino, "hf_dinov2_bin", False)]
    config = vit_config(pos_grid=8, layer_scale=True)
    case("hf_dinov2", config, files, IMAGENET, u8, cls.numpy(),
         extra={"embed_mean": mean.numpy().tolist(), "embed_cls_mean": torch.cat([cls, mean], 1).numpy().tolist()})

    # The torch-hub layout of the same weights, and the hub's interpolation.
    from safetensors.torch import load_file

    hub = {}
    for k, v in load_file(os.path.join(OUT, "hf_dinov2", "model.safetensors")).items():
        hub.update({k2: v for k2 in hub_names({k: None}, 0)})
    for i in range(2):
        for leaf in ("weight", "bias"):
            parts = [hub.pop(f"blocks.{i}.attention.attention.{p}.{leaf}") for p in ("query", "key", "value")]
            hub[f"blocks.{i}.attn.qkv.{leaf}"] = torch.cat(parts)
    torch.save(hub, os.path.join(OUT, "dinov2_hub_tiny.pth"))

    emb = dino.embeddings

    def hub_interpolate(self, embeddings, height, width):
        # facebookresearch/dinov2 vision_transformer.py interpolate_pos_encoding
        pos = self.position_embeddings.float()
        n = pos.shape[1] - 1
        m = int(math.sqrt(n))
        w0, h0 = width // 8, height // 8
        if w0 == m and h0 == m:
            return self.position_embeddings
        sx, sy = float(w0 + 0.1) / m, float(h0 + 0.1) / m
        patch = F.interpolate(pos[:, 1:].reshape(1, m, m, -1).permute(0, 3, 1, 2),
                              scale_factor=(sx, sy), mode="bicubic", antialias=False)
        patch = patch.permute(0, 2, 3, 1).view(1, -1, pos.shape[-1])
        return torch.cat((pos[:, :1], patch), dim=1)

    emb.interpolate_pos_encoding = hub_interpolate.__get__(emb)
    with torch.no_grad():
        hidden = dino(pixel_values=x).last_hidden_state
    case("hub_dinov2", config, ["dinov2_hub_tiny.pth"], IMAGENET, u8, hidden[:, 0].numpy())


def named_shapes():
    """Tensor names and shapes of every named model at full size, in each
    layout it loads, as upstream code builds and saves them (no weights
    kept): the Rust test checks that the tool's configurations ask for
    exactly these."""
    import tempfile

    import open_clip
    import torchvision
    from safetensors import safe_open
    from transformers import (CLIPConfig, CLIPModel, CLIPVisionConfig, CLIPVisionModelWithProjection,
                              Dinov2Config, Dinov2Model, SiglipConfig, SiglipModel, SiglipVisionModel)

    def shapes_of_state_dict(sd):
        return {k: list(v.shape) for k, v in sd.items()}

    def shapes_saved(model):
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
                return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}

    out = {}
    with torch.device("meta"):
        for name in ["vit_b_16", "vit_b_32", "vit_l_16", "convnext_tiny", "convnext_small", "convnext_base"]:
            out[name] = {"torchvision": shapes_of_state_dict(getattr(torchvision.models, name)().state_dict())}
    for name, arch in [("clip_vit_b_32", "ViT-B-32-quickgelu"), ("clip_vit_b_16", "ViT-B-16-quickgelu"),
                       ("clip_vit_l_14", "ViT-L-14-quickgelu")]:
        out[name] = {"open_clip": shapes_of_state_dict(open_clip.create_model(arch, pretrained=None).state_dict())}
    hf_clip = {
        "clip_vit_b_32": (dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                               patch_size=32, image_size=224),
                          dict(hidden_size=512, intermediate_size=2048, num_attention_heads=8, num_hidden_layers=12), 512),
        "clip_vit_b_16": (dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                               patch_size=16, image_size=224),
                          dict(hidden_size=512, intermediate_size=2048, num_attention_heads=8, num_hidden_layers=12), 512),
        "clip_vit_l_14": (dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                               patch_size=14, image_size=224),
                          dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12), 768),
    }
    for name, (vision, text, dim) in hf_clip.items():
        out[name]["hf_clip"] = shapes_saved(CLIPModel(CLIPConfig(vision_config=vision, text_config=text, projection_dim=dim)))
        out[name]["hf_clip_vision"] = shapes_saved(
            CLIPVisionModelWithProjection(CLIPVisionConfig(projection_dim=dim, **vision)))
    siglip = SiglipModel(SiglipConfig())  # the defaults are siglip-base-patch16-224's
    out["siglip_base_patch16_224"] = {"hf_siglip": shapes_saved(siglip),
                                      "hf_siglip_vision": shapes_saved(SiglipVisionModel(siglip.config.vision_config))}
    for name, (width, depth, heads) in {"dinov2_vits14": (384, 12, 6), "dinov2_vitb14": (768, 12, 12),
                                        "dinov2_vitl14": (1024, 24, 16)}.items():
        hf = shapes_saved(Dinov2Model(Dinov2Config(hidden_size=width, num_hidden_layers=depth, num_attention_heads=heads,
                                                   patch_size=14, image_size=518)))
        out[name] = {"hf_dinov2": hf, "hub_dinov2": hub_names(hf, depth)}
    with open(os.path.join(OUT, "named_shapes.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))


def hub_names(hf, depth):
    """Transformers' Dinov2 names → the torch-hub checkpoint's (q/k/v fused)."""
    hub = {}
    for k, v in hf.items():
        k2 = (k.replace("embeddings.cls_token", "cls_token")
               .replace("embeddings.mask_token", "mask_token")
               .replace("embeddings.position_embeddings", "pos_embed")
               .replace("embeddings.patch_embeddings.projection", "patch_embed.proj")
               .replace("encoder.layer.", "blocks.")
               .replace("attention.output.dense", "attn.proj")
               .replace("layer_scale1.lambda1", "ls1.gamma")
               .replace("layer_scale2.lambda1", "ls2.gamma")
               .replace("layernorm.", "norm."))
        hub[k2] = v
    for i in range(depth):
        for leaf in ("weight", "bias"):
            parts = [hub.pop(f"blocks.{i}.attention.attention.{p}.{leaf}") for p in ("query", "key", "value")]
            hub[f"blocks.{i}.attn.qkv.{leaf}"] = [3 * parts[0][0]] + parts[0][1:]
    return hub


ZERO_SHOT_LABELS = ["tabby cat", 'a "golden" retriever', "car, red", "oak tree", "sail boat"]


def zero_shot_cases():
    """Zero-shot classification as upstream runs it, on the checkpoints the
    cases above saved, loaded back the way users load them. The text side is
    each model's own text tower on random token ids; its embeddings
    (unnormalised, as encode_text / get_text_features return them) are saved
    as the class matrix the tool reads:
    - open_clip: model(image, text) → softmax(logit_scale.exp() · img · txtᵀ),
      from a .npy with the labels in a .txt beside it;
    - HF CLIPModel: logits_per_image.softmax(-1), from a .safetensors
      with the labels in its metadata;
    - HF SiglipModel: sigmoid(logits_per_image) (its logit_scale and
      logit_bias were randomised, so they are read from the file);
    - CLIPVisionModelWithProjection has no logit_scale: the tool uses 100,
      the value trained CLIP models reach (and open_clip's zero-shot
      evaluation uses), so the reference does too.
    Writes zero_shot.json; run after the other cases (it reads their files)."""
    import shutil
    import tempfile

    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg
    from safetensors.torch import save_file
    from transformers import CLIPConfig, CLIPModel, CLIPVisionModelWithProjection, SiglipConfig, SiglipModel

    reference = json.load(open(os.path.join(OUT, "reference.json")))["cases"]
    labels = ZERO_SHOT_LABELS
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(1, 64, (len(labels), 8), generator=g)
    out = {}

    def u8_of(name):
        side = reference[name]["side"]
        return np.fromfile(os.path.join(OUT, reference[name]["images"]), dtype=np.uint8).reshape(-1, 3, side, side)

    def hf_load(cls, config, folder):
        with tempfile.TemporaryDirectory() as tmp:
            config.save_pretrained(tmp)
            shutil.copy(os.path.join(OUT, folder, "model.safetensors"), tmp)
            return cls.from_pretrained(tmp).eval()

    model = open_clip.model.CLIP(
        embed_dim=16,
        vision_cfg=CLIPVisionCfg(layers=2, width=32, head_width=8, patch_size=8, image_size=32, mlp_ratio=4.0),
        text_cfg=CLIPTextCfg(context_length=8, vocab_size=64, width=32, heads=4, layers=1),
        quick_gelu=True,
    )
    model.load_state_dict(torch.load(os.path.join(OUT, "open_clip_pytorch_model.bin")))
    model.eval()
    with torch.no_grad():
        text = model.encode_text(ids)
        img, txt, scale = model(normalised(u8_of("open_clip"), CLIP), ids)
        probs = (scale * img @ txt.T).softmax(-1)
    np.save(os.path.join(OUT, "zs_open_clip.npy"), text.numpy().astype(np.float32))
    with open(os.path.join(OUT, "zs_open_clip.txt"), "w") as f:
        f.write("\n".join(labels) + "\n")
    out["open_clip"] = {"checkpoint": "open_clip_pytorch_model.bin", "classes": "zs_open_clip.npy",
                        "probs": probs.numpy().tolist()}

    vision = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text_cfg = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                    vocab_size=64, max_position_embeddings=8)
    clip = hf_load(CLIPModel, CLIPConfig(vision_config=vision, text_config=text_cfg, projection_dim=16), "hf_clip")
    x = normalised(u8_of("hf_clip"), CLIP)
    with torch.no_grad():
        text = clip.get_text_features(input_ids=ids)
        text = getattr(text, "pooler_output", text)
        probs = clip(input_ids=ids, pixel_values=x).logits_per_image.softmax(-1)
    save_file({"embeddings": text.contiguous()}, os.path.join(OUT, "zs_hf_clip.safetensors"),
              metadata={"labels": json.dumps(labels)})
    out["hf_clip"] = {"checkpoint": "hf_clip/model.safetensors", "classes": "zs_hf_clip.safetensors",
                      "probs": probs.numpy().tolist()}
    tower_config = clip.config.vision_config
    tower_config.projection_dim = 16
    tower = hf_load(CLIPVisionModelWithProjection, tower_config, "hf_clip_vision")
    with torch.no_grad():
        img = F.normalize(tower(pixel_values=x).image_embeds, dim=-1)
        probs = (100.0 * img @ F.normalize(text, dim=-1).T).softmax(-1)
    out["hf_clip_vision"] = {"checkpoint": "hf_clip_vision/model.safetensors", "classes": "zs_hf_clip.safetensors",
                             "probs": probs.numpy().tolist()}

    siglip = hf_load(SiglipModel, SiglipConfig(vision_config=vision, text_config=text_cfg), "hf_siglip")
    x = normalised(u8_of("hf_siglip"), HALF)
    with torch.no_grad():
        text = siglip.get_text_features(input_ids=ids)
        text = getattr(text, "pooler_output", text)
        probs = torch.sigmoid(siglip(input_ids=ids, pixel_values=x).logits_per_image)
    np.save(os.path.join(OUT, "zs_hf_siglip.npy"), text.numpy().astype(np.float32))
    with open(os.path.join(OUT, "zs_hf_siglip.txt"), "w") as f:
        f.write("\n".join(labels) + "\n")
    out["hf_siglip"] = {"checkpoint": "hf_siglip/model.safetensors", "classes": "zs_hf_siglip.npy",
                        "probs": probs.numpy().tolist(),
                        "logit_scale": float(siglip.logit_scale), "logit_bias": float(siglip.logit_bias)}
    with open(os.path.join(OUT, "zero_shot.json"), "w") as f:
        json.dump({"labels": labels, "cases": out}, f)
    print("wrote", len(out), "zero-shot cases to", OUT)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    torchvision_cases()
    open_clip_cases()
    hf_cases()
    named_shapes()
    import open_clip
    import torchvision
    import transformers
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "open_clip": open_clip.__version__, "transformers": transformers.__version__}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases}, f)
    print("wrote", len(cases), "cases to", OUT)
    zero_shot_cases()


if __name__ == "__main__":
    main()
