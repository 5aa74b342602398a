"""Golden encodings for the C++ byte-level BPE tokenizer (tests/unit/
test_bpe_tokenizer.cpp), computed with the Hugging Face `tokenizers` library
(the independent reference; tools/requirements.txt pins its version).

Regenerate (the python that has `tokenizers`: jobs/install-deps.sh):

    /usr/bin/python3 tests/golden/make_tokenizer_golden.py           # writes tests/golden/data/tokenizer_*.json
    /usr/bin/python3 tests/golden/make_tokenizer_golden.py --check   # exit 1 if a file would change

tokenizer_bpe.json: a GPT-2-style byte-level BPE (vocabulary 1024, the
end-of-text token <|endoftext|>) trained on the shipped corpus's training
text plus a multilingual paragraph, so that merges exist inside accented,
Greek, Cyrillic and CJK characters too.

tokenizer_cases.json: for each text, the library's pre-tokenization pieces
(as substrings of the text) and its ids from Tokenizer.encode(text,
add_special_tokens=False), for the file as written ("base") and for two
variants the C++ test makes by editing the same fields
(pre_tokenizer.add_prefix_space = true; model.ignore_merges = true with an
extra vocabulary entry " world" that no merge builds).
Texts: hand-picked edge cases of GPT-2's regex, a slice of the corpus, and
random strings over a pool of characters of every class (fixed seed).
"""
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "data")
EOT = "<|endoftext|>"

MULTILINGUAL = (
    "Le café où l'élève naïf mangeait des crêpes était déjà fermé. Ça coûte très cher à Noël. "
    "Die Straße führt über die Brücke zum Schloß; Grüße aus München! Fußgänger müssen warten. "
    "Ο γρήγορος καφέ αλεπού πηδά πάνω από τον σκύλο. Съешь же ещё этих мягких французских булок. "
    "東京は日本の首都です。日本語の文章を書きます。 Ångström, façade, jalapeño, São Paulo, Øresund.\n"
)

EDGE_CASES = [
    "Hello world",
    "Hello  world",
    "  leading spaces",
    "trailing spaces   ",
    "a\n\nb",
    "a \nb",
    "\n\n\nThe end.\n",
    "tabs\tand\t\ttabs",
    "line\r\nbreaks\r\n",
    "I'm sure you're right, we've seen they'll do what I'd say; it's Tom's.",
    "I'M SHOUTING, DON'T",
    "'s 's ''s x's 'sup 'll'd",
    "numbers 12345 and 3.14159, 1,000,000; 2nd",
    "mixed abc123def 456ghi",
    "punctuation!!! ??? ... --- ***",
    "café naïve Ångström façade jalapeño",
    "Straße Grüße Fußgänger",
    "e\u0301 combining accent",
    "Ο γρήγορος καφέ αλεπού",
    "Съешь же ещё",
    "日本語の文章",
    "emoji 👍🏽 and ❤️ hearts",
    "no\u00a0break space and\u2028line separator and\u3000ideographic",
    "superscript x² and roman Ⅻ and fraction ½",
    "<|endoftext|>",
    "before<|endoftext|>after",
    "two<|endoftext|><|endoftext|> eots",
    "<|endoftext|> Begins with an end",
    " ",
    "",
    "x",
    "=" * 300,
    "   \n   \n",
]

POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + list(" " * 12) + list("\n\n\t\r") + list("'.,;:!?-\"()[]{}<>|/\\@#$%^&*_+=~`")
        + list("éèêëàâäôöûüçñßÅøæœ") + ["e\u0301", "a\u0308"] + list("αβγδΩжщЯ")
        + list("日本語中文") + ["👍", "🏽", "❤️"] + ["\u00a0", "\u2028", "\u3000", "\u0085"]
        + list("²½Ⅻ٣") + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "<|endoftext|>"])


def corpus_text():
    with open(os.path.join(ROOT, "inputs", "data", "corpus_train.bin"), "rb") as f:
        f.seek(1024)
        raw = f.read()
    return bytes(raw[0::2]).decode("utf-8")  # byte tokens: the low byte of each uint16 is the text


def train_tokenizer(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text] + [MULTILINGUAL] * 20, trainer)
    return tok


def variant(tok_json, name):
    data = json.loads(tok_json)
    if name == "add_prefix_space":
        data["pre_tokenizer"]["add_prefix_space"] = True
    elif name == "ignore_merges":
        # A whole-word token that the merges never build, so that the flag shows.
        data["model"]["ignore_merges"] = True
        data["model"]["vocab"]["\u0120world"] = len(data["model"]["vocab"])
    return Tokenizer.from_str(json.dumps(data))


def cases(tok_json, corpus):
    rng = random.Random(20240520)
    texts = EDGE_CASES + [corpus[5000:7000], MULTILINGUAL]
    texts += ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    splitter = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizers = {name: variant(tok_json, name) for name in ("base", "add_prefix_space", "ignore_merges")}
    out = []
    for text in texts:
        case = {"text": text, "pieces": [text[a:b] for _, (a, b) in splitter.pre_tokenize_str(text)]}
        for name, tok in tokenizers.items():
            case[name] = tok.encode(text, add_special_tokens=False).ids
        assert tokenizers["base"].decode(case["base"], skip_special_tokens=False) == text
        out.append(case)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="exit 1 if a file would change")
    args = parser.parse_args()
    import tokenizers
    corpus = corpus_text()
    tok_json = train_tokenizer(corpus).to_str(pretty=True)
    files = {
        "tokenizer_bpe.json": tok_json + "\n",
        "tokenizer_cases.json": json.dumps({"made_with": f"tokenizers {tokenizers.__version__}",
                                            "cases": cases(tok_json, corpus)}, indent=0) + "\n",
    }
    changed = []
    for name, text in files.items():
        path = os.path.join(OUT, name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:
            changed.append(name)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    print(("would change: " if args.check else "wrote: ") + (", ".join(changed) or "nothing"))
    sys.exit(1 if args.check and changed else 0)


if __name__ == "__main__":
    main()
