#!/usr/bin/env python3
"""Writes gpu-worker/tokenizers/src/ftfy_tables.json: the data of ftfy's fix_text
(ftfy 6, Apache-2.0, by Robyn Speer), which open_clip's tokenizer runs on
every text: the single-byte charmaps of its mojibake search, its regexes
(written out from Python's parse of them, so that Rust's regex and
fancy-regex read the same language), its HTML entity table and the
character maps of its small fixers, and the HTML5 entity table of Python's
html.unescape, which open_clip applies twice after ftfy.

    pip install ftfy
    python3 scripts/make_ftfy_tables.py
"""
import html.entities
import json
import os

import ftfy
import ftfy.bad_codecs  # noqa: F401  (registers the sloppy-* codecs)
import ftfy.badness as badness
import ftfy.chardata as chardata
import ftfy.fixes as fixes

try:
    import re._parser as sre_parse
    import re._constants as sre_c
except ImportError:  # Python < 3.11
    import sre_parse
    import sre_constants as sre_c

OUT = os.path.join("gpu-worker", "tokenizers", "src", "ftfy_tables.json")


def char_escape(code):
    return "\\x{%X}" % code


def emit(tree):
    out = []
    for op, av in tree:
        out.append(emit_one(op, av))
    return "".join(out)


def emit_one(op, av):
    if op is sre_c.LITERAL:
        return char_escape(av)
    if op is sre_c.ANY:
        return "."
    if op is sre_c.IN:
        parts, negate = [], False
        for o, a in av:
            if o is sre_c.NEGATE:
                negate = True
            elif o is sre_c.LITERAL:
                parts.append(char_escape(a))
            elif o is sre_c.RANGE:
                parts.append(char_escape(a[0]) + "-" + char_escape(a[1]))
            elif o is sre_c.CATEGORY:
                parts.append({sre_c.CATEGORY_DIGIT: r"\d", sre_c.CATEGORY_SPACE: r"\s",
                              sre_c.CATEGORY_WORD: r"\w", sre_c.CATEGORY_NOT_DIGIT: r"\D",
                              sre_c.CATEGORY_NOT_SPACE: r"\S", sre_c.CATEGORY_NOT_WORD: r"\W"}[a])
            else:
                raise ValueError(f"class item {o}")
        return "[" + ("^" if negate else "") + "".join(parts) + "]"
    if op is sre_c.BRANCH:
        return "(?:" + "|".join(emit(b) for b in av[1]) + ")"
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        lo, hi, sub = av
        hi_s = "" if hi is sre_c.MAXREPEAT else str(hi)
        quant = {(0, ""): "*", (1, ""): "+", (0, "1"): "?"}.get((lo, hi_s), "{%d,%s}" % (lo, hi_s))
        if hi_s == str(lo) and (lo, hi_s) != (0, "1"):
            quant = "{%d}" % lo
        lazy = "?" if op is sre_c.MIN_REPEAT else ""
        return "(?:" + emit(sub) + ")" + quant + lazy
    if op is sre_c.SUBPATTERN:
        group, add, dele, sub = av
        return ("(" if group else "(?:") + emit(sub) + ")"
    if op is sre_c.ASSERT_NOT:
        direction, sub = av
        return ("(?<!" if direction < 0 else "(?!") + emit(sub) + ")"
    if op is sre_c.ASSERT:
        direction, sub = av
        return ("(?<=" if direction < 0 else "(?=") + emit(sub) + ")"
    if op is sre_c.AT:
        return {sre_c.AT_BEGINNING: "^", sre_c.AT_END: "$", sre_c.AT_BOUNDARY: r"\b",
                sre_c.AT_NON_BOUNDARY: r"\B", sre_c.AT_BEGINNING_STRING: r"\A",
                sre_c.AT_END_STRING: r"\z"}[av]
    raise ValueError(f"op {op}")


def rust_pattern(compiled):
    return emit(sre_parse.parse(compiled.pattern, compiled.flags))


def bytes_pattern(compiled):
    """A bytes regex for regex::bytes, with (?-u) and \\xHH escapes."""
    def esc(code):
        return "\\x%02X" % code
    def go(tree):
        out = []
        for op, av in tree:
            if op is sre_c.LITERAL:
                out.append(esc(av))
            elif op is sre_c.IN:
                parts = []
                for o, a in av:
                    if o is sre_c.LITERAL:
                        parts.append(esc(a))
                    elif o is sre_c.RANGE:
                        parts.append(esc(a[0]) + "-" + esc(a[1]))
                    else:
                        raise ValueError(o)
                out.append("[" + "".join(parts) + "]")
            elif op is sre_c.BRANCH:
                out.append("(?:" + "|".join(go(b) for b in av[1]) + ")")
            else:
                raise ValueError(op)
        return "".join(out)
    return "(?-u)" + go(sre_parse.parse(compiled.pattern.decode("latin-1"), 0))


def main():
    tables = {"ftfy": ftfy.__version__}
    charmaps = []
    for enc in chardata.CHARMAP_ENCODINGS:
        table = bytes(range(256)).decode(enc)
        assert len(table) == 256 and len(set(table)) == 256, enc
        charmaps.append([enc, table])
    tables["charmaps"] = charmaps
    tables["badness"] = rust_pattern(badness.BADNESS_RE)
    tables["utf8_detector"] = rust_pattern(chardata.UTF8_DETECTOR_RE)
    tables["ansi"] = rust_pattern(fixes.ANSI_RE)
    tables["altered_utf8"] = bytes_pattern(chardata.ALTERED_UTF8_RE)
    tables["lossy_utf8"] = bytes_pattern(chardata.LOSSY_UTF8_RE)
    # Sorted by code point, which is UTF-8 byte order: the Rust side
    # binary-searches them.
    tables["ftfy_entities"] = sorted(chardata.HTML_ENTITIES.items())
    tables["html5_entities"] = sorted(html.entities.html5.items())
    import html as h
    tables["invalid_charrefs"] = sorted(h._invalid_charrefs.items())
    tables["invalid_codepoints"] = sorted(h._invalid_codepoints)

    def charmap(mapping):
        return sorted((chr(k) if isinstance(k, int) else k, v or "") for k, v in mapping.items())

    tables["control_chars"] = charmap(chardata.CONTROL_CHARS)
    tables["ligatures"] = charmap(chardata.LIGATURES)
    tables["width_map"] = charmap(chardata.WIDTH_MAP)
    with open(OUT, "w") as f:
        json.dump(tables, f, indent=0)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
