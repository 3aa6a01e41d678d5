#!/usr/bin/env python3
"""Expected WordPiece ids from an independent tokenizer (Hugging Face `tokenizers`, Rust):
BertNormalizer(clean_text, handle_chinese_chars, strip_accents, lowercase) + BertPreTokenizer +
WordPiece(max_input_chars_per_word=200), no [CLS]/[SEP]. One output line of space-separated ids
per input line, the format of `prepare_bert_data tokenize`.

  bert_expected_ids.py --vocab VOCAB --out OUT FILE...
  (the C++ tests hold prepare_bert_data's tokenizer against OUT)

--engine reference uses google-research/bert's tokenization.py logic re-expressed in
benchmarks/datasets/bert_reference.py instead. `tokenizers` deviates from it in two documented
ways (hard_cases.txt shows both): it lower-cases Greek capital sigma to σ even at the end of a
word (Python's str.lower gives ς), and it drops private-use and unassigned code points (Co, Cn)
that the reference keeps (so such a word becomes [UNK]). The committed hard-case ids come from the
reference engine; WikiText-2 and WordNet are held against `tokenizers`.

With --if-present, input files that do not exist are skipped (the shared data may be absent);
exit 0 with an empty OUT when none is present.
"""
import argparse
import os
import sys


def make_tokenizer(vocab_path):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece(WordPiece.read_file(vocab_path), unk_token="[UNK]",
                              max_input_chars_per_word=200))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def read_lines(path):
    # Split on \n only, as the C++ reader does (str.splitlines would also split on \r, \x1c...).
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--if-present", action="store_true")
    ap.add_argument("--engine", choices=["hf", "reference"], default="hf")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    files = [f for f in args.files if os.path.exists(f) or not args.if_present]
    if not files or not os.path.exists(args.vocab):
        if args.if_present:
            print("bert_expected_ids: inputs absent, nothing generated", file=sys.stderr)
            open(args.out, "w").close()
            return 0
    if args.engine == "hf":
        tok = make_tokenizer(args.vocab)
        encode = lambda lines: [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "benchmarks", "datasets"))
        import bert_reference
        ref = bert_reference.FullTokenizer(args.vocab)
        encode = lambda lines: [ref.convert_tokens_to_ids(ref.tokenize(l)) for l in lines]
    n = 0
    with open(args.out, "w") as out:
        for path in files:
            lines = read_lines(path)
            for ids in encode(lines):
                out.write(" ".join(map(str, ids)) + "\n")
            n += len(lines)
    print(f"bert_expected_ids: {n} lines from {len(files)} file(s) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
