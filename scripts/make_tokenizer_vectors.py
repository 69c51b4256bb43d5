#!/usr/bin/env python3
"""Token ids from upstream tokenizers, for gpu-worker/tests/it/tokenizers.rs,
and the checkpoint of the zero-shot-from-labels test.

- open_clip's SimpleTokenizer (its built-in bpe_simple_vocab_16e6, context
  77) on STRINGS, with its cleaning (ftfy, html.unescape, whitespace, lower)
  recorded beside each;
- transformers' CLIPTokenizerFast on a CLIP tokenizer.json built here from
  open_clip's vocabulary cut to its first 2000 merges (the published
  vocabulary is 3.6 MB; the file's machinery is the same), called as CLIP's
  processor calls it: padding="max_length", truncation=True, max_length=77;
- open_clip_text.bin: an open_clip CLIP with a small image tower (as the
  families' open_clip case) and a text tower over the real 49408-token
  vocabulary (width 8), seeded; zero_shot_labels.json: open_clip's
  build_zero_shot_classifier on it for labels and templates, and
  softmax(logit_scale.exp() · img · classifier) on families/open_clip.u8.

    pip install torch open_clip_torch transformers ftfy
    python3 scripts/make_tokenizer_vectors.py
"""
import gzip
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from make_family_vectors import randomise

OUT = os.path.join("gpu-worker", "tests", "vectors", "text")
FAMILIES = os.path.join("gpu-worker", "tests", "vectors", "families")


def strings():
    s = [
        "", " ", "   ", "\t\n", "a", "A", "cat", "a photo of a cat.", "A Photo Of A CAT!",
        "hello world", "hello  world", "  leading and trailing  ", "tabs\tand\nnewlines\r\nand\rreturns",
        "it's", "they're", "we've", "I'm", "you'll", "he'd", "IT'S", "don't", "o'clock", "''s", "rock 'n' roll",
        "123", "3.14159", "1,000,000", "2024-11-24", "v1.2.3", "x86_64", "#hashtag", "@mention", "user@example.com",
        "https://example.com/a?b=c&d=e", "C++ and C#", "snake_case_name", "CamelCaseName", "a-b-c", "a—b–c",
        "!!!", "???", "...", "(parenthesis)", "[brackets]", "{braces}", "<angle>", "$100", "50%", "a*b/c+d=e",
        "café", "naïve", "résumé", "Ångström", "Straße", "ﬁsh and ﬂowers", "Œuvre", "æsir", "Ørsted", "Łódź",
        "São Paulo", "Zürich", "İstanbul", "ΑΘΗΝΑ", "Σίσυφος", "ΣΑΣ", "Москва", "Київ", "שלום", "مرحبا",
        "हिन्दी", "ภาษาไทย", "한국어", "日本語のテキスト", "中文文本", "漢字とかな", "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ　１２３",
        "😀", "🐱 cat", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "✓ done", "★★★", "♪♫", "∑∫√∞",
        "&amp;", "&lt;b&gt;bold&lt;/b&gt;", "Tom &amp; Jerry", "&quot;quoted&quot;", "&#39;apos&#39;", "&#x41;&#66;",
        "&eacute;t&eacute;", "P&EACUTE;REZ", "&nbsp;space", "&amp;amp;", "&copy; 2024", "fish &amp chips", "&notanentity;",
        "&#128512;", "&#0;", "&#x110000;", "&#150;", "<b>&amp;</b>", "5 &lt; 6", "a&b", "&", "&;",
        "cafÃ©", "naÃ¯ve", "rÃ©sumÃ©", "Ã¼ber", "â€œquotedâ€\x9d", "donâ€™t", "â€œ like this â€�", "Ã\xa0 la carte",
        "voilÃ le travail", "sÃ³", "Ãºnico", "ÐŸÑ€Ð¸Ð²ÐµÑ‚", "æ—¥æœ¬èªž", "ðŸ˜€", "The Mona Lisa doesnÃƒÂ¢Ã¢â€šÂ¬Ã¢â€žÂ¢t have eyebrows.",
        "Ã¢â‚¬Å“mixedÃ¢â‚¬Â\x9d", "l’Ã©tÃ©", "ГўвЂљВ¬", "Ð¿Ñ€Ð¸Ð²ÐµÑ‚ Ð¼Ð¸Ñ€", "â€¦", "Â£100", "Â©", "ÃƒÂ©",
        "\x80\x93dash", "price: 10\x80", "\x85next", "curly \u2018single\u2019 and \u201cdouble\u201d", "ʼapostrophe",
        "\x1b[31mred\x1b[0m", "bell\x07char", "zero\u200bwidth", "soft\u00adhyphen", "bom\ufeffhere",
        "line\u2028sep", "para\u2029sep", "nbsp\u00a0here", "thin\u2009space", "ideo\u3000space", "\x1c\x1d\x1e\x1fseps",
        "e\u0301 combining", "A\u030a", "Hangul \u1100\u1161", "ℌ𝔢𝔩𝔩𝔬", "𝐛𝐨𝐥𝐝", "①②③", "ⅫⅣ", "½ cup", "x²", "™",
        "<start_of_text>", "<end_of_text>", "a <end_of_text> b", "<<start_of_text>", "<START_OF_TEXT>", "<|endoftext|>",
        "word " * 100, "supercalifragilisticexpialidocious " * 10, "x" * 500, "a" * 76, "ab " * 38, "é" * 80,
        "🐱" * 40, "日本" * 60, "the quick brown fox jumps over the lazy dog " * 5,
        "Mixed CASE with Numbers123 and under_scores", "tab\tsep\tvalues", "semi;colon;separated", "pipe|separated",
        "back\\slash", "forward/slash", "\"double\"", "'single'", "`backtick`", "~tilde~", "^caret^", "=equals=",
        "a photo of a {}.", "itap of a {}.", "a bad photo of the {}.", "a origami {}.", "a tattoo of the {}.",
        "tabby cat", "golden retriever", "car, red", "oak tree", "sail boat", "a red car", "New York City",
        "ok\u0000null", "\ud7ff edge", "\U0001F9FF nazar", "ǅ titlecase", "ﬀ ligature", "ŉ", "ǰ",
        "dog's toy", "dogs' toys", "rock'n'roll", "ain't", "y'all'd've", "O'Brien", "l'été", "qu'il",
        "100km/h", "3x3", "4K HDR", "COVID-19", "e.g.", "i.e.", "U.S.A.", "Ph.D.", "a.m.", "#1", "No. 5",
        "Ünïcödé Çhäräctérs", "ĀāĒēĪīŌōŪū", "ĂăĄąĆć", "ȘșȚț", "ẞ", "Ꭰ", "ꙮ", "Ⓐⓑⓒ", "🄰🄱", "𝟘𝟙𝟚",
    ]
    return s


def clip_vocab(merges_limit=None):
    from open_clip.tokenizer import bytes_to_unicode, default_bpe
    merges = gzip.open(default_bpe()).read().decode("utf-8").split("\n")
    merges = merges[1:49152 - 256 - 2 + 1]
    if merges_limit:
        merges = merges[:merges_limit]
    merges = [tuple(m.split()) for m in merges]
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(vocab)}, merges


def main():
    import open_clip
    import transformers
    from open_clip.tokenizer import SimpleTokenizer, _clean_lower
    from transformers import CLIPTokenizer, CLIPTokenizerFast

    os.makedirs(OUT, exist_ok=True)
    texts = strings()
    assert len(texts) >= 200, len(texts)
    tok = SimpleTokenizer(context_length=77)
    ids = tok(texts).tolist()
    cleaned = [_clean_lower(t) for t in texts]

    # A CLIP tokenizer.json as transformers converts one.
    vocab, merges = clip_vocab(2000)
    folder = os.path.join(OUT, "hf_clip_tokenizer")
    os.makedirs(folder, exist_ok=True)
    # transformers 5 builds its CLIPTokenizer (a tokenizers backend) from the
    # vocabulary and merges directly; transformers 4 took file names.
    fast = CLIPTokenizer(vocab=vocab, merges=[tuple(m) for m in merges])
    fast.backend_tokenizer.save(os.path.join(folder, "tokenizer.json"))
    reloaded = CLIPTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
    hf_ids = reloaded(texts, padding="max_length", truncation=True, max_length=77)["input_ids"]

    # The zero-shot checkpoint: the families' small image tower, a text tower
    # over the real vocabulary.
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg
    torch.manual_seed(0)
    model = open_clip.model.CLIP(
        embed_dim=16,
        vision_cfg=CLIPVisionCfg(layers=2, width=32, head_width=8, patch_size=8, image_size=32, mlp_ratio=4.0),
        text_cfg=CLIPTextCfg(context_length=77, vocab_size=49408, width=8, heads=2, layers=1),
        quick_gelu=True,
    )
    randomise(model, 31)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(30.0))
    model.eval()
    torch.save(model.state_dict(), os.path.join(OUT, "open_clip_text.bin"))
    labels = ["tabby cat", 'a "golden" retriever', "car, red", "oak tree", "café au lait"]
    templates = ["a photo of a {}.", "itap of a {}.", "a bad photo of the {}.", "a origami {}."]
    from open_clip.zero_shot_classifier import build_zero_shot_classifier
    with torch.no_grad():
        classifier = build_zero_shot_classifier(model, tok, labels, templates, num_classes_per_batch=2,
                                                use_tqdm=False)
        side = 32
        u8 = np.fromfile(os.path.join(FAMILIES, "open_clip.u8"), dtype=np.uint8).reshape(-1, 3, side, side)
        mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1) * 255
        std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1) * 255
        x = (torch.from_numpy(u8).float() - mean) / std
        img = F.normalize(model.encode_image(x), dim=-1)
        probs = (model.logit_scale.exp() * img @ classifier).softmax(dim=-1)
        texts_emb = F.normalize(model.encode_text(tok(["a photo of a tabby cat.", "", "x" * 500])), dim=-1)
    with open(os.path.join(OUT, "zero_shot_labels.json"), "w") as f:
        json.dump({"labels": labels, "templates": templates, "probs": probs.tolist(),
                   "classifier": classifier.T.tolist(),
                   "texts": ["a photo of a tabby cat.", "", "x" * 500], "text_embeddings": texts_emb.tolist()}, f)

    import ftfy
    versions = {"open_clip": open_clip.__version__, "transformers": transformers.__version__,
                "ftfy": ftfy.__version__, "torch": torch.__version__}
    with open(os.path.join(OUT, "tokens.json"), "w") as f:
        json.dump({"versions": versions, "context": 77,
                   "cases": [{"text": t, "clean": c, "open_clip": i, "hf_clip": h}
                             for t, c, i, h in zip(texts, cleaned, ids, hf_ids)]}, f, ensure_ascii=False)
    print("wrote", len(texts), "strings to", OUT)


if __name__ == "__main__":
    main()
