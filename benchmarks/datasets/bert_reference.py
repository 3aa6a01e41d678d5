#!/usr/bin/env python3
"""The logic of google-research/bert's tokenization.py (uncased: BasicTokenizer with
do_lower_case=True + WordpieceTokenizer, max_input_chars_per_word=200) and
create_pretraining_data.py (MLPerf copy: no whole-word masking), re-expressed without
TensorFlow (Apache-2.0, The Google AI Language Team). Used as the Python side of
bench_bert_data.sh and as a second expected-ids engine (scripts/bert_expected_ids.py).

  bert_reference.py tokenize VOCAB FILE          ids per line, like `prepare_bert_data tokenize`
  bert_reference.py create VOCAB FILE... [--max-seq-length N] [--dupe-factor N] [--seed N]
      [--paragraphs]                              tokenise + create instances, print statistics
"""
import argparse
import collections
import random
import re
import sys
import time
import unicodedata


def load_vocab(path):
    vocab = collections.OrderedDict()
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            vocab[line.strip()] = index
    return vocab


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or (0x20000 <= cp <= 0x2A6DF)
            or (0x2A700 <= cp <= 0x2B73F) or (0x2B740 <= cp <= 0x2B81F)
            or (0x2B820 <= cp <= 0x2CEAF) or (0xF900 <= cp <= 0xFAFF)
            or (0x2F800 <= cp <= 0x2FA1F))


class BasicTokenizer:
    def tokenize(self, text):
        text = self._clean_text(text)
        text = self._tokenize_chinese_chars(text)
        split_tokens = []
        for token in whitespace_tokenize(text):
            token = self._run_strip_accents(token.lower())
            split_tokens.extend(self._run_split_on_punc(token))
        return whitespace_tokenize(" ".join(split_tokens))

    def _run_strip_accents(self, text):
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    def _run_split_on_punc(self, text):
        output = []
        start_new_word = True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    def _tokenize_chinese_chars(self, text):
        output = []
        for char in text:
            if _is_chinese_char(ord(char)):
                output.extend((" ", char, " "))
            else:
                output.append(char)
        return "".join(output)

    def _clean_text(self, text):
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text):
        output_tokens = []
        for token in whitespace_tokenize(text):
            chars = list(token)
            if len(chars) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            is_bad = False
            start = 0
            sub_tokens = []
            while start < len(chars):
                end = len(chars)
                cur_substr = None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    is_bad = True
                    break
                sub_tokens.append(cur_substr)
                start = end
            if is_bad:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens


class FullTokenizer:
    def __init__(self, vocab_file):
        self.vocab = load_vocab(vocab_file)
        self.basic_tokenizer = BasicTokenizer()
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text):
        split_tokens = []
        for token in self.basic_tokenizer.tokenize(text):
            for sub_token in self.wordpiece_tokenizer.tokenize(token):
                split_tokens.append(sub_token)
        return split_tokens

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]


# --- create_pretraining_data.py ---------------------------------------------------------------

class TrainingInstance:
    def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels, is_random_next):
        self.tokens = tokens
        self.segment_ids = segment_ids
        self.is_random_next = is_random_next
        self.masked_lm_positions = masked_lm_positions
        self.masked_lm_labels = masked_lm_labels


MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])


def split_sentences(paragraph):
    """The C++ splitter's rule (corpus.cc), for --paragraphs input."""
    out, start = [], 0
    for m in re.finditer(r"[.!?]+[\"')\]]*(\s+)(?=\S)", paragraph):
        nxt = paragraph[m.end()]
        before = paragraph[start:m.start()].split()
        word = before[-1] if before and not paragraph[m.start() - 1].isspace() else ""
        abbrev = (m.group(0).startswith(".") and m.group(0).rstrip().rstrip("\"')]") == "."
                  and (len(word) == 1 and word.isalpha() or word.lower() in ABBREVIATIONS))
        if "a" <= nxt <= "z" or abbrev:
            continue
        out.append(paragraph[start:m.start() + len(m.group(0)) - len(m.group(1))])
        start = m.end()
    if paragraph[start:].strip():
        out.append(paragraph[start:])
    return out


def heading_level(line):
    m = re.fullmatch(r"((?:= )+)\S.*?((?: =)+)", line)
    if not m or len(m.group(1)) != len(m.group(2)):
        return 0
    return len(m.group(1)) // 2


ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no",
                 "prof", "inc", "co", "ltd"}


def create_training_instances(input_files, tokenizer, max_seq_length, dupe_factor, short_seq_prob,
                              masked_lm_prob, max_predictions_per_seq, rng, paragraphs):
    all_documents = [[]]
    for input_file in input_files:
        with open(input_file, encoding="utf-8") as reader:
            for line in reader:
                line = line.strip()
                if paragraphs:  # WikiText: " = Title = " starts an article; headings are not text
                    level = heading_level(line)
                    if level == 1:
                        all_documents.append([])
                    if level or not line:
                        continue
                elif not line:
                    all_documents.append([])
                    continue
                for sentence in (split_sentences(line) if paragraphs else [line]):
                    tokens = tokenizer.tokenize(sentence)
                    if tokens:
                        all_documents[-1].append(tokens)
        all_documents.append([])
    all_documents = [x for x in all_documents if x]
    rng.shuffle(all_documents)
    vocab_words = list(tokenizer.vocab.keys())
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(create_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng))
    rng.shuffle(instances)
    return instances, all_documents


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob,
                                   masked_lm_prob, max_predictions_per_seq, vocab_words, rng):
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                is_random_next = False
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1
                assert len(tokens_b) >= 1
                tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                (tokens, masked_lm_positions, masked_lm_labels) = create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng)
                instances.append(TrainingInstance(tokens, segment_ids, masked_lm_positions,
                                                  masked_lm_labels, is_random_next))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng):
    cand_indexes = [i for i, token in enumerate(tokens) if token not in ("[CLS]", "[SEP]")]
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if index in covered_indexes:
            continue
        covered_indexes.add(index)
        if rng.random() < 0.8:
            masked_token = "[MASK]"
        elif rng.random() < 0.5:
            masked_token = tokens[index]
        else:
            masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
        output_tokens[index] = masked_token
        masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))
    masked_lms = sorted(masked_lms, key=lambda x: x.index)
    return (output_tokens, [p.index for p in masked_lms], [p.label for p in masked_lms])


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("vocab")
    t.add_argument("file")
    c = sub.add_parser("create")
    c.add_argument("vocab")
    c.add_argument("files", nargs="+")
    c.add_argument("--max-seq-length", type=int, default=128)
    c.add_argument("--max-predictions", type=int, default=0)
    c.add_argument("--dupe-factor", type=int, default=1)
    c.add_argument("--seed", type=int, default=12345)
    c.add_argument("--paragraphs", action="store_true")
    args = ap.parse_args()
    tokenizer = FullTokenizer(args.vocab)
    if args.cmd == "tokenize":
        with open(args.file, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        out = sys.stdout
        for line in lines:
            out.write(" ".join(map(str, tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)))))
            out.write("\n")
        return 0
    start, cpu_start = time.perf_counter(), time.process_time()
    cap = args.max_predictions or int(0.15 * args.max_seq_length)
    instances, docs = create_training_instances(
        args.files, tokenizer, args.max_seq_length, args.dupe_factor, 0.1, 0.15, cap,
        random.Random(args.seed), args.paragraphs)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    n = len(instances)
    masked = sum(len(i.masked_lm_positions) for i in instances)
    maskable = sum(len(i.tokens) - 3 for i in instances)
    print(f"reference: {len(docs)} documents, {sum(len(d) for d in docs)} sentences, "
          f"{sum(len(s) for d in docs for s in d)} tokens, {n} instances, random next "
          f"{sum(i.is_random_next for i in instances) / n:.4f}, masked {masked / maskable:.4f}, "
          f"mean length {sum(len(i.tokens) for i in instances) / n:.1f}")
    print(f"time: tokenize + instances {seconds:.3f} s wall, {cpu:.3f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
