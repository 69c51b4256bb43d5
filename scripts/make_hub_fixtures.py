"""Hugging Face repos for `cli/tests/it/hub/` (#42): small seeded models of
the transformers families the tool builds from a hub config, each saved by
transformers' own `save_pretrained` (config.json, model.safetensors) with
its PIL image processor's `preprocessor_config.json`, at sizes none of the
built-in names has, and the outputs transformers gives on the repo's
sample photographs (`samples/*.jpg`) through that processor.

    target/torch-venv/bin/python scripts/make_hub_fixtures.py cli/tests/hub_repos

(the torch venv with transformers, timm, open_clip_torch, sentencepiece and
protobuf; each run rewrites every repo byte for byte, and reference.json
up to the last bits of torch's CPU threads)

Repos (folder `ORG--NAME`):
- `tiny-org--vit-2labels`: ViTForImageClassification with 2 labels (the
  shape of Falconsai/nsfw_image_detection), 64 px, bilinear squash;
- `tiny-org--vit-sharded`: a ViTForImageClassification with 3 labels
  saved in shards of 100 KB (`model.safetensors.index.json`);
- `tiny-org--vit-backbone`: ViTModel (no head): the class token after the
  final norm as the embedding;
- `tiny-org--dinov2-multilabel`: Dinov2ForImageClassification with 3
  labels and `problem_type: multi_label_classification` (a sigmoid per
  label), a BitImageProcessor's shorter side to 64 and a 56 px crop;
- `tiny-org--dinov2-registers`, `tiny-org--dinov2-registers-3labels`:
  Dinov2WithRegistersModel (its pooled class token) and its classifier
  with 3 labels, 3 register tokens, a 4x4 position grid resampled
  antialiased to 3x3 and 5x5 crops;
- `tiny-org--dinov2-swiglu`, `tiny-org--dinov2-swiglu-2labels`: DINOv2
  with the giant's SwiGLU MLPs at width 40 (gated width 112): the
  backbone's pooled class token and a 2-label classifier, under the
  names save_pretrained writes (transformers 4's `weights_in` and
  `weights_out`, as the hub's giant checkpoints hold them);
- `tiny-org--vit-2labels-bin`, `tiny-org--resnet-basic-bin`: those two
  models with `pytorch_model.bin` (torch.save of the saved tensors, as
  transformers 4 wrote it) instead of model.safetensors;
- `tiny-org--open-clip`: open_clip's own repo (`open_clip_config.json`,
  `open_clip_model.safetensors`, no transformers config) of its ViT CLIP
  at width 32, 48 px, 16-wide heads, mean and std of its own, against
  open_clip's transform and `encode_image`;
- `tiny-org--clip-small`: CLIPModel at width 32, patch 16, 48 px, a 24-wide
  projection: the unit-length image features; its text tower (width 16,
  GELU, context 32) over a 2514-token CLIP BPE, with its `tokenizer.json`;
- `tiny-org--siglip-small`: SiglipModel at width 32, patch 8, 32 px: the
  unit-length image features; its text tower (width 16, context 24, a
  head projecting to 32) over a 1000-piece SentencePiece, with its
  `spiece.model`;
- `tiny-org--clip-classifier`: CLIPForImageClassification with 3 labels;
- `tiny-org--siglip-classifier`: SiglipForImageClassification with 4
  labels, multi-label (a sigmoid each);
- `tiny-org--clip-vision`: CLIPVisionModelWithProjection (model_type
  `clip_vision_model`) at width 32, 32 px, a 20-wide projection;
- `tiny-org--clip-vision-bare`: CLIPVisionModel (no projection), its
  pooled class token;
- `tiny-org--siglip-vision`: SiglipVisionModel (`siglip_vision_model`)
  at width 24, 40 px in 12 px patches (a 3x3 grid, as So400m's 384 px
  in 14 px patches is 27x27 with pixels to spare);
- `tiny-org--convnext-5labels`: ConvNextForImageClassification with 5
  labels at stage widths 16, 24, 32, 40 and depths 1, 1, 2, 1, a
  ConvNextImageProcessor's `crop_pct` (the shorter side to 73, a 64 crop);
- `tiny-org--resnet-3labels`: ResNetForImageClassification with 3 labels
  at stem width 16, stage widths 32, 48, 64, 80 and depths 1, 1, 2, 1,
  bottlenecks striding in their first 1x1 and a first stage that
  downsamples, a ConvNextImageProcessor as microsoft/resnet-50's;
- `tiny-org--resnet-basic`: ResNetForImageClassification of basic blocks
  (stem 8, widths 8, 16, 24, 32, depths 2, 1, 1, 1) with 4 unnamed labels;
- `tiny-org--convnext-bare`, `tiny-org--resnet-bare`: ConvNextModel and
  ResNetModel (no heads) at small widths: their `pooler_output`;
- `tiny-org--timm-convnext-bare`: timm's `convnext_tiny` at widths 8..32
  with `num_classes` 0: its pre-logits features;
- `tiny-org--timm-resnet18`, `tiny-org--timm-resnet50-bare`: timm's
  `resnet18` (channels 8..32, 3 named classes) and `resnet50` (channels
  4..16, no head) saved by `save_for_hf`, through timm's transform;
- `tiny-org--timm-convnext`: timm's `convnext_tiny` at stage widths 16,
  24, 32, 40 and depths 1, 1, 2, 1 with 7 classes, saved by timm's own
  `save_for_hf` (config.json with `architecture`, `model_args`,
  `pretrained_cfg`; model.safetensors), its reference through timm's own
  transform from that config (bicubic, crop_pct 0.875, 224 px);
- `tiny-org--timm-vit`: timm's `vit_base_patch16_224` at width 48, depth
  2, 3 heads, 64 px with 5 named classes (`label_names`), saved by
  `save_for_hf`, its reference through timm's transform (bicubic,
  crop_pct 0.9, mean and std 0.5);
- `tiny-org--beit-small`: a BEiT config only (a family not built in).

`reference.json`: per repo, per sample (sorted by name), `probs` (the
classifiers' softmax or sigmoid) or `embed`; for CLIP and SigLIP also
`text` (the unit-length text features of `texts`) and `zero_shot` (each
image's probabilities over `labels` through `template`).
"""

import json
import math
import pathlib
import shutil
import sys

import numpy as np
import torch
import transformers
from PIL import Image

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from make_family_vectors import randomise  # noqa: E402

SEED = 42
TEXT = pathlib.Path("gpu-worker/tests/vectors/text")
# Texts for the text towers: plain, cased, empty, accented, emoji, and one
# longer than either context (cut as the tokenizers cut it).
TEXTS = ["a photo of a cat.", "A DOG running on the Beach!", "", "café au lait", "🐈 and 🐕",
         " ".join(["word"] * 60)]
LABELS = ["cat", "dog", "red car", "oak tree"]
TEMPLATE = "a photo of a {}."
PROMPTS = ["a blurry photo of the {}.", "itap of a {}.", "a {} in a video game."]


def samples() -> list[pathlib.Path]:
    return sorted(pathlib.Path("samples").glob("*.jpg"))


def save(model, processor, out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)


def pixels(processor, path: pathlib.Path) -> torch.Tensor:
    image = Image.open(path).convert("RGB")
    return processor(images=image, return_tensors="pt")["pixel_values"]


def main(out: pathlib.Path) -> None:
    torch.manual_seed(SEED)
    reference: dict[str, dict] = {}
    photos = samples()
    images = [p.name for p in photos]

    def classify(repo, model, processor, sigmoid=False):
        save(model, processor, out / repo)
        rows = []
        with torch.no_grad():
            for p in photos:
                logits = model(pixel_values=pixels(processor, p)).logits[0].double()
                probs = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, 0)
                rows.append(probs.tolist())
        reference[repo] = {"images": images, "probs": rows}

    def embed(repo, model, processor, features):
        save(model, processor, out / repo)
        rows = []
        with torch.no_grad():
            for p in photos:
                rows.append(features(pixels(processor, p))[0].double().tolist())
        reference[repo] = {"images": images, "embed": rows}

    def text_reference(repo, model, tokenize, softmax):
        """get_text_features (unit length) of TEXTS, and zero-shot over
        LABELS through the default template as upstream scores it: CLIP's
        softmax of exp(logit_scale)·img·txt, SigLIP's sigmoid of it plus
        logit_bias, on the repo's images."""
        def text_features(texts):
            ids = torch.tensor(tokenize(texts))
            with torch.no_grad():
                return torch.nn.functional.normalize(
                    _features(model.get_text_features(input_ids=ids)), dim=-1)
        def scored(classes):
            rows = []
            with torch.no_grad():
                for image in reference[repo]["embed"]:
                    logits = torch.tensor(image, dtype=torch.float64) @ classes.double().T * model.logit_scale.exp().double()
                    if softmax:
                        rows.append(torch.softmax(logits, 0).tolist())
                    else:
                        rows.append(torch.sigmoid(logits + model.logit_bias.double()).tolist())
            return rows
        classes = text_features([TEMPLATE.format(label) for label in LABELS])
        reference[repo]["text"] = {"texts": TEXTS, "embed": text_features(TEXTS).double().tolist()}
        reference[repo]["zero_shot"] = {"labels": LABELS, "template": TEMPLATE,
                                        "probs": scored(classes)}
        # Several templates averaged as open_clip's zero_shot_classifier
        # does: each template's unit rows, their mean, made unit again.
        per_template = torch.stack([text_features([t.format(label) for label in LABELS])
                                    for t in PROMPTS])
        averaged = torch.nn.functional.normalize(per_template.mean(0), dim=-1)
        reference[repo]["zero_shot_prompts"] = {"labels": LABELS, "prompts": PROMPTS,
                                                "probs": scored(averaged)}

    vit = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
               intermediate_size=96, image_size=64, patch_size=16)
    vit_processor = transformers.ViTImageProcessorPil(
        size={"height": 64, "width": 64}, resample=2)
    config = transformers.ViTConfig(**vit, id2label={0: "normal", 1: "nsfw"},
                                    label2id={"normal": 0, "nsfw": 1})
    model = randomise(transformers.ViTForImageClassification(config), SEED)
    classify("tiny-org--vit-2labels", model, vit_processor)

    # A checkpoint in shards (model.safetensors.index.json and the files it
    # names), as transformers saves a model beyond its shard size.
    config = transformers.ViTConfig(**vit, id2label={0: "a", 1: "b", 2: "c"},
                                    label2id={"a": 0, "b": 1, "c": 2})
    model = randomise(transformers.ViTForImageClassification(config), SEED + 17)
    sharded = out / "tiny-org--vit-sharded"
    sharded.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
    vit_processor.save_pretrained(sharded)
    assert (sharded / "model.safetensors.index.json").is_file()
    rows = []
    with torch.no_grad():
        for p in photos:
            rows.append(torch.softmax(model(pixel_values=pixels(vit_processor, p)).logits[0].double(), 0).tolist())
    reference["tiny-org--vit-sharded"] = {"images": images, "probs": rows}

    backbone = randomise(transformers.ViTModel(transformers.ViTConfig(**vit)), SEED + 1)
    embed("tiny-org--vit-backbone", backbone, vit_processor,
          lambda x: backbone(pixel_values=x).last_hidden_state[:, 0])

    dino = transformers.Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=4,
        patch_size=14, image_size=518, problem_type="multi_label_classification",
        id2label={0: "cat", 1: "dog", 2: "car"}, label2id={"cat": 0, "dog": 1, "car": 2})
    dino_processor = transformers.BitImageProcessorPil(
        size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56}, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    model = randomise(transformers.Dinov2ForImageClassification(dino), SEED + 2)
    classify("tiny-org--dinov2-multilabel", model, dino_processor, sigmoid=True)

    # CLIP and SigLIP with their text towers over real tokenizers: the
    # tokenizer.json and spiece.model of gpu-worker's text vectors
    # (scripts/make_tokenizer_vectors.py, make_siglip_text_vectors.py),
    # at contexts and widths no published model has.
    # DINOv2 with registers: 3 register tokens, its 4x4 position grid
    # resampled antialiased (as Dinov2WithRegisters does) to the crop's
    # 3x3 (shrunk) for the backbone and 5x5 (grown) for the classifier.
    registers = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=4,
                     patch_size=14, image_size=56, num_register_tokens=3)
    model = randomise(transformers.Dinov2WithRegistersModel(
        transformers.Dinov2WithRegistersConfig(**registers)), SEED + 18)
    embed("tiny-org--dinov2-registers", model, transformers.BitImageProcessorPil(
        size={"shortest_edge": 48}, crop_size={"height": 42, "width": 42}, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
        lambda x: model(pixel_values=x).pooler_output)
    config = transformers.Dinov2WithRegistersConfig(
        **registers, id2label={0: "x", 1: "y", 2: "z"}, label2id={"x": 0, "y": 1, "z": 2})
    model = randomise(transformers.Dinov2WithRegistersForImageClassification(config), SEED + 19)
    classify("tiny-org--dinov2-registers-3labels", model, transformers.BitImageProcessorPil(
        size={"shortest_edge": 80}, crop_size={"height": 70, "width": 70}, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]))

    # DINOv2 with SwiGLU MLPs (the giant's): 40 wide, mlp_ratio 4, so the
    # gated width is two thirds of 160 rounded up to a multiple of 8 (112).
    # Saved as save_pretrained writes them: under transformers 4's names,
    # as the hub's giant checkpoints are (`weights_in`: the gate's rows,
    # then the up projection's; `weights_out`), which transformers 5 keeps
    # on disk (its `gate_proj`, `up_proj` and `down_proj` are in memory
    # only).
    swiglu = dict(hidden_size=40, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=4,
                  patch_size=14, image_size=56, use_swiglu_ffn=True)
    model = randomise(transformers.Dinov2Model(transformers.Dinov2Config(**swiglu)), SEED + 30)
    embed("tiny-org--dinov2-swiglu", model, dino_processor,
          lambda x: model(pixel_values=x).pooler_output)
    config = transformers.Dinov2Config(
        **swiglu, id2label={0: "p", 1: "q"}, label2id={"p": 0, "q": 1})
    model = randomise(transformers.Dinov2ForImageClassification(config), SEED + 31)
    classify("tiny-org--dinov2-swiglu-2labels", model, dino_processor)

    clip_tokenizer = TEXT / "hf_clip_tokenizer" / "tokenizer.json"
    vocab = len(json.loads(clip_tokenizer.read_text())["model"]["vocab"])
    clip = transformers.CLIPConfig(
        text_config=dict(hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=2, vocab_size=vocab, max_position_embeddings=32,
                         hidden_act="gelu", bos_token_id=vocab - 2, eos_token_id=vocab - 1,
                         pad_token_id=vocab - 1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=48, patch_size=16),
        projection_dim=24)
    clip_processor = transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 48}, crop_size={"height": 48, "width": 48})
    model = randomise(transformers.CLIPModel(clip), SEED + 3)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(50.0))
    embed("tiny-org--clip-small", model, clip_processor,
          lambda x: torch.nn.functional.normalize(_features(model.get_image_features(pixel_values=x)), dim=-1))
    shutil.copy(clip_tokenizer, out / "tiny-org--clip-small" / "tokenizer.json")
    tokenizer = transformers.CLIPTokenizerFast(tokenizer_file=str(clip_tokenizer))
    text_reference("tiny-org--clip-small", model, lambda t: tokenizer(
        t, padding="max_length", truncation=True, max_length=32)["input_ids"], softmax=True)

    spiece = TEXT / "siglip" / "spiece.model"
    sp_tokenizer = transformers.SiglipTokenizer(vocab_file=str(spiece))
    siglip = transformers.SiglipConfig(
        text_config=dict(hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=2, vocab_size=sp_tokenizer.vocab_size,
                         max_position_embeddings=24, projection_size=32),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8))
    siglip_processor = transformers.SiglipImageProcessorPil(
        size={"height": 32, "width": 32})
    model = randomise(transformers.SiglipModel(siglip), SEED + 4)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(10.0))
        model.logit_bias.fill_(-2.5)
    embed("tiny-org--siglip-small", model, siglip_processor,
          lambda x: torch.nn.functional.normalize(_features(model.get_image_features(pixel_values=x)), dim=-1))
    shutil.copy(spiece, out / "tiny-org--siglip-small" / "spiece.model")
    text_reference("tiny-org--siglip-small", model, lambda t: sp_tokenizer(
        t, padding="max_length", truncation=True, max_length=24)["input_ids"], softmax=False)

    # CLIP and SigLIP fine-tuned as classifiers: CLIPForImageClassification
    # (its head over the patch tokens' mean before post_layernorm) with 3
    # labels, SiglipForImageClassification (over the normed tokens' mean)
    # with 4 labels scored multi-label.
    names = ["anime", "photo", "sketch"]
    config = transformers.CLIPConfig(
        text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=48, patch_size=16),
        id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    model = randomise(transformers.CLIPForImageClassification(config), SEED + 15)
    classify("tiny-org--clip-classifier", model, clip_processor)
    names = ["indoor", "outdoor", "people", "text"]
    config = transformers.SiglipConfig(
        text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8),
        problem_type="multi_label_classification",
        id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    model = randomise(transformers.SiglipForImageClassification(config), SEED + 16)
    classify("tiny-org--siglip-classifier", model, siglip_processor, sigmoid=True)

    # Vision towers saved alone: CLIPVisionModelWithProjection (as
    # IP-Adapter's image encoders are), a GELU tower at 32 px with a
    # 20-wide projection; SiglipVisionModel at width 24, 40 px in 12 px
    # patches (not a whole number of them, as So400m's 384 in 14).
    clip_vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=32, patch_size=8, projection_dim=20, hidden_act="gelu")
    model = randomise(transformers.CLIPVisionModelWithProjection(clip_vision), SEED + 10)
    embed("tiny-org--clip-vision", model, transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        lambda x: torch.nn.functional.normalize(model(pixel_values=x).image_embeds, dim=-1))
    # CLIPVisionModel (no projection): its pooled class token after
    # post_layernorm, as transformers gives it (not unit length); saved by
    # transformers 5 without the vision_model. prefix.
    model = randomise(transformers.CLIPVisionModel(clip_vision), SEED + 22)
    embed("tiny-org--clip-vision-bare", model, transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        lambda x: model(pixel_values=x).pooler_output)
    siglip_vision = transformers.SiglipVisionConfig(
        hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        image_size=40, patch_size=12)
    model = randomise(transformers.SiglipVisionModel(siglip_vision), SEED + 11)
    embed("tiny-org--siglip-vision", model, transformers.SiglipImageProcessorPil(
        size={"height": 40, "width": 40}),
        lambda x: torch.nn.functional.normalize(model(pixel_values=x).pooler_output, dim=-1))

    convnext = transformers.ConvNextConfig(
        hidden_sizes=[16, 24, 32, 40], depths=[1, 1, 2, 1], image_size=64,
        id2label={i: name for i, name in enumerate(["daisy", "dandelion", "rose", "sunflower", "tulip"])},
        label2id={name: i for i, name in enumerate(["daisy", "dandelion", "rose", "sunflower", "tulip"])})
    convnext_processor = transformers.ConvNextImageProcessorPil(
        size={"shortest_edge": 64}, crop_pct=0.875, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    model = randomise(transformers.ConvNextForImageClassification(convnext), SEED + 5)
    classify("tiny-org--convnext-5labels", model, convnext_processor)

    # transformers' ResNets: bottlenecks striding in their first 1×1 and a
    # first stage that downsamples (its ResNet v1 switches), and basic
    # blocks at the defaults with unnamed labels; both at widths no
    # torchvision ResNet has, with BatchNorm statistics drawn so that
    # folding them is tested.
    resnet_processor = transformers.ConvNextImageProcessorPil(
        size={"shortest_edge": 64}, crop_pct=0.875, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    names = ["cat", "dog", "bird"]
    resnet = transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[32, 48, 64, 80], depths=[1, 1, 2, 1],
        layer_type="bottleneck", downsample_in_first_stage=True, downsample_in_bottleneck=True,
        id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    model = batch_norms(randomise(transformers.ResNetForImageClassification(resnet), SEED + 7), SEED + 7)
    classify("tiny-org--resnet-3labels", model, resnet_processor)
    basic = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[2, 1, 1, 1],
        layer_type="basic", num_labels=4)
    model = batch_norms(randomise(transformers.ResNetForImageClassification(basic), SEED + 8), SEED + 8)
    classify("tiny-org--resnet-basic", model, resnet_processor)
    # Older repos hold only `pytorch_model.bin` (transformers 4's
    # torch.save of the state dict under the names it saves; 5 writes
    # safetensors only, and its in-memory names differ): the same two
    # models that way, their saved tensors as they are.
    from safetensors.torch import load_file
    for repo in ["tiny-org--vit-2labels", "tiny-org--resnet-basic"]:
        copy = out / (repo + "-bin")
        shutil.copytree(out / repo, copy)
        torch.save(load_file(copy / "model.safetensors"), copy / "pytorch_model.bin")
        (copy / "model.safetensors").unlink()
        reference[repo + "-bin"] = reference[repo]

    # Checkpoints without their heads embed what a head would read:
    # ConvNextModel's and ResNetModel's pooler_output.
    bare = transformers.ConvNextConfig(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1])
    model = randomise(transformers.ConvNextModel(bare), SEED + 12)
    embed("tiny-org--convnext-bare", model, convnext_processor,
          lambda x: model(pixel_values=x).pooler_output)
    bare = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 24, 32, 40], depths=[1, 1, 1, 1])
    model = batch_norms(randomise(transformers.ResNetModel(bare), SEED + 13), SEED + 13)
    embed("tiny-org--resnet-bare", model, resnet_processor,
          lambda x: model(pixel_values=x).pooler_output.flatten(1))

    import timm
    from timm.models._hub import save_for_hf

    def timm_repo(repo, model, args, label_names=None):
        """`model` saved by timm's own `save_for_hf`, and its outputs through
        the transform timm builds from the saved `pretrained_cfg`: softmax
        with a head, else its pre-logits features."""
        folder = out / repo
        folder.mkdir(parents=True, exist_ok=True)
        save_for_hf(model, str(folder), model_config={"label_names": label_names} if label_names else None,
                    model_args=args, safe_serialization=True)
        saved = json.loads((folder / "config.json").read_text())["pretrained_cfg"]
        transform = timm.data.create_transform(**timm.data.resolve_data_config(pretrained_cfg=saved))
        rows = []
        with torch.no_grad():
            for p in photos:
                y = model(transform(Image.open(p).convert("RGB"))[None])[0].double()
                rows.append((torch.softmax(y, 0) if args["num_classes"] else y).tolist())
        reference[repo] = {"images": images, ("probs" if args["num_classes"] else "embed"): rows}

    args = dict(depths=(1, 1, 2, 1), dims=(16, 24, 32, 40), num_classes=7)
    model = randomise(timm.create_model("convnext_tiny", pretrained=False, **args), SEED + 6).eval()
    timm_repo("tiny-org--timm-convnext", model, args)

    # timm's ConvNeXt without its head (num_classes 0): the head's norm alone.
    args = dict(depths=(1, 1, 1, 1), dims=(8, 16, 24, 32), num_classes=0)
    model = randomise(timm.create_model("convnext_tiny", pretrained=False, **args), SEED + 14).eval()
    timm_repo("tiny-org--timm-convnext-bare", model, args)

    # timm's plain ResNets: torchvision's network and names, at other
    # widths (model_args' channels); a basic-block one with 3 named
    # classes, and a bottleneck one without its head.
    args = dict(channels=(8, 16, 24, 32), stem_width=8, num_classes=3)
    model = batch_norms(randomise(timm.create_model("resnet18", pretrained=False, **args), SEED + 20), SEED + 20)
    timm_repo("tiny-org--timm-resnet18", model, args, ["red", "green", "blue"])
    args = dict(channels=(4, 8, 12, 16), stem_width=8, num_classes=0)
    model = batch_norms(randomise(timm.create_model("resnet50", pretrained=False, **args), SEED + 21), SEED + 21)
    timm_repo("tiny-org--timm-resnet50-bare", model, args)

    # timm's plain ViT (vit_base_patch16_224's augreg preprocessing: bicubic,
    # crop_pct 0.9, mean and std 0.5) at 64 px with 5 named classes.
    args = dict(embed_dim=48, depth=2, num_heads=3, img_size=64, patch_size=16, num_classes=5)
    model = randomise(timm.create_model("vit_base_patch16_224", pretrained=False, **args), SEED + 9).eval()
    timm_repo("tiny-org--timm-vit", model, args, ["ant", "bee", "fly", "moth", "wasp"])

    # open_clip's own repo (what `push_to_hf_hub` writes: open_clip_config.json
    # with model_cfg and preprocess_cfg, open_clip_model.safetensors; no
    # transformers config.json): its ViT at width 32 in 16 px patches of
    # 48 px with 16-wide heads, a 24-wide embedding, mean and std of its
    # own, and the reference through open_clip's own transform and
    # encode_image.
    import open_clip
    from open_clip.push_to_hf_hub import save_config_for_hf
    from safetensors.torch import save_file
    # Its text tower is OpenAI's at width 8 over open_clip's own 49408-token
    # vocabulary (no tokenizer file in such a repo) and a 16-token context.
    cfg = {"embed_dim": 24,
           "vision_cfg": {"image_size": 48, "layers": 2, "width": 32, "head_width": 16,
                          "patch_size": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 8, "heads": 2,
                        "layers": 1}}
    model = randomise(open_clip.CLIP(**cfg), SEED + 32).eval()
    mean, std = (0.49, 0.45, 0.41), (0.27, 0.26, 0.28)
    model.visual.image_mean, model.visual.image_std = mean, std
    model.visual.preprocess_cfg = {"interpolation": "bicubic", "resize_mode": "shortest"}
    repo = out / "tiny-org--open-clip"
    repo.mkdir(parents=True, exist_ok=True)
    save_config_for_hf(model, repo / "open_clip_config.json", model_config=cfg)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              repo / "open_clip_model.safetensors", metadata={"format": "pt"})
    transform = open_clip.image_transform(48, is_train=False, mean=mean, std=std,
                                          interpolation="bicubic", resize_mode="shortest")
    rows = []
    with torch.no_grad():
        for p in photos:
            x = transform(Image.open(p).convert("RGB")).unsqueeze(0)
            rows.append(torch.nn.functional.normalize(model.encode_image(x), dim=-1)[0].double().tolist())
    reference["tiny-org--open-clip"] = {"images": images, "embed": rows}

    class OpenClipText:
        """open_clip's text side as text_reference asks for transformers'."""
        logit_scale = model.logit_scale

        @staticmethod
        def get_text_features(input_ids):
            return model.encode_text(input_ids)

    open_clip_tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=16)
    text_reference("tiny-org--open-clip", OpenClipText,
                   lambda t: open_clip_tokenizer(t).tolist(), softmax=True)

    beit = out / "tiny-org--beit-small"
    beit.mkdir(parents=True, exist_ok=True)
    transformers.BeitConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, image_size=32, patch_size=8).save_pretrained(beit)
    # A config alone: the tool refuses the family before it reads weights,
    # and the hub's listing needs a weight file to name.
    (beit / "model.safetensors").write_bytes(b"")

    (out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")


def batch_norms(model, seed):
    """Every BatchNorm's statistics and affine drawn afresh (`randomise`
    draws running variances around 0), so that a fold is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                def u():
                    return torch.rand(m.num_features, generator=g, dtype=torch.float64).float()
                m.weight.copy_(0.8 + 0.4 * u())
                m.bias.copy_((u() - 0.5) * 0.2)
                m.running_mean.copy_((u() - 0.5) * 0.2)
                m.running_var.copy_(0.5 + u())
    model.eval()
    return model


def _features(output):
    """transformers 5 returns a model output where 4 returned a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
