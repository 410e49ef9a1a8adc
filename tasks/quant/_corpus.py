"""The quantization lab's text: CPython's bundled docs (or a local file), tokens and batches.

Shape letters: B batch, T sequence length (model positions), V vocabulary.

The default corpus is `pydoc_data.topics` (about 465 KB of English with code,
punctuation and line breaks), shipped with every CPython: no download at run time.
Tokens are characters or bytes; the first ids are special tokens. The split is fixed:
the last `val_fraction` of the text is validation, the rest training.

Batches:

- encoder (BERT-like MLM): `[CLS] A [SEP] B [SEP]`, where A and B are the two halves of
  one contiguous text chunk cut at a random point (so [SEP] moves), segment ids 0 for
  `[CLS] A [SEP]` and 1 for `B [SEP]`; 15% of the text positions are selected for
  prediction, of which 80% become [MASK], 10% a random text token, 10% stay (BERT).
- decoder (OPT-like causal LM): `[BOS] c_0 ... c_{T-2}` predicting `c_0 ... c_{T-1}`
  (OPT also starts every sequence with one `</s>` token).
"""

from __future__ import annotations

import bisect
import dataclasses
import pathlib

import numpy as np

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]")
"""Special tokens, ids 0..5 in this order; text tokens follow."""

PAD, UNK, CLS, SEP, MASK, BOS = range(len(SPECIAL_TOKENS))

DELIMITER_CHARS = ".,;:!?\n"
"""Punctuation that plays the paper's delimiter role ('.' and ',' in BERT) besides [SEP]."""


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A tokenized text with a fixed train/validation split."""

    level: str  # 'char' or 'byte'
    symbols: tuple[str, ...]  # the text token of each id >= len(SPECIAL_TOKENS) (chars or bytes)
    train_ids: np.ndarray  # int32 token ids of the training text
    val_ids: np.ndarray  # int32 token ids of the validation text
    source: str  # 'pydoc_data.topics' or the file path

    @property
    def vocab_size(self) -> int:
        """Special tokens plus text tokens."""
        return len(SPECIAL_TOKENS) + len(self.symbols)

    def token_names(self) -> list[str]:
        """A printable name for every id (special tokens in brackets, '\\n' for a newline)."""
        shown = {"\n": "\\n", " ": "␣", "\t": "\\t"}
        return [*SPECIAL_TOKENS, *(shown.get(s, s) for s in self.symbols)]

    def decode(self, ids: np.ndarray) -> str:
        """The text of `ids` (special tokens spelled out)."""
        names = [*SPECIAL_TOKENS, *self.symbols]
        return "".join(names[int(i)] for i in np.asarray(ids).ravel())

    def special_mask(self) -> np.ndarray:
        """Boolean (V,): the special tokens."""
        mask = np.zeros(self.vocab_size, bool)
        mask[: len(SPECIAL_TOKENS)] = True
        return mask

    def delimiter_mask(self) -> np.ndarray:
        """Boolean (V,): special tokens and `DELIMITER_CHARS` (the paper's no-op targets)."""
        mask = self.special_mask()
        for i, s in enumerate(self.symbols):
            if s in DELIMITER_CHARS:
                mask[len(SPECIAL_TOKENS) + i] = True
        return mask


SYNTHETIC_CORPORA: tuple[str, ...] = (
    "bigram_backcopy",
    "trigger_induction",
    "uniform_backcopy",
    "delimited_backcopy",
)
"""Generated corpora (`synthetic_text`) where some heads have nothing to do on most tokens."""

TRIGGERS = "rpx"
"""The trigger characters of the synthetic corpora (Guo et al. 2024's Bigram-Backcopy)."""

SYNTHETIC_CHARS = 400_000
"""Length of a synthetic corpus: the issue's probes' 400k characters."""

_SYNTHETIC_SEED = 2024  # the data stays fixed across model seeds, as the real text does

SENTENCE_LETTERS = (8, 12)
"""'delimited_backcopy': each sentence has 8 to 12 letters (uniform) before its '.'."""


def synthetic_text(name: str, n_chars: int = SYNTHETIC_CHARS, seed: int = _SYNTHETIC_SEED) -> str:
    """A generated corpus over the 26 letters a-z (and '.'), the same for the same arguments.

    A bigram chain whose transition rows are Dirichlet(0.2) draws (a few likely successors
    per letter) is followed (uniform letters for 'uniform_backcopy'), except right after a
    trigger (r, p or x):

    - 'bigram_backcopy' (Guo et al. 2024): the next letter copies the one before the trigger.
      A copying head in the first layer is needed after triggers and idle everywhere else.
    - 'trigger_induction': the next letter is the one that followed the previous occurrence of
      the letter before the trigger (an induction step; the letter before the trigger when it
      has not occurred before). That takes a previous-token head in layer 0 and an induction
      head in layer 1, so the idle head sits in a later layer and an earlier layer's FFN has
      to write its sink feature.
    - 'uniform_backcopy': the back-copy over independent uniform letters. A masked letter
      (MLM) is then predictable only next to a trigger, so an encoder's heads, which on the
      bigram chain always read the neighbours, have nothing to do on most positions too.
    - 'delimited_backcopy': sentences of 8 to 12 letters, each ended by '.', a chain of the
      same kind (its own draw of the rows) and the back-copy inside a sentence, and a new
      sentence starting from a uniform letter
      (nothing crosses a '.'). The '.' is a delimiter whose hidden state depends on its
      neighbours, as '.' and [SEP] do in the paper's BERT data, not a constant at position 0
      (`_delimited_text`; n_chars counts the '.'s too).
    """
    if name not in SYNTHETIC_CORPORA:
        raise ValueError(f"synthetic corpus must be one of {', '.join(SYNTHETIC_CORPORA)}")
    if n_chars < 1:
        raise ValueError(f"a synthetic corpus needs n_chars >= 1, got {n_chars}")
    if name == "delimited_backcopy":
        return _delimited_text(n_chars, seed)
    rng = np.random.default_rng(seed)
    cum = np.cumsum(rng.dirichlet(np.full(26, 0.2), size=26), axis=1)
    draws = rng.random(n_chars).tolist()
    triggers = {ord(c) - ord("a") for c in TRIGGERS}
    rows = [row.tolist() for row in cum]
    out = [int(rng.integers(26))]
    follower: dict[int, int] = {}  # letter -> the letter after its latest finished occurrence
    for i in range(1, n_chars):
        prev = out[-1]
        if prev in triggers and i >= 2:
            before = out[-2]
            letter = follower.get(before, before) if name == "trigger_induction" else before
        elif name == "uniform_backcopy":
            letter = min(int(draws[i] * 26), 25)
        else:
            letter = min(bisect.bisect_right(rows[prev], draws[i]), 25)
        out.append(letter)
        if i >= 2:
            follower[out[-3]] = out[-2]  # the pair (i-2, i-1): earlier than the current query
    return "".join(chr(ord("a") + c) for c in out)


def _delimited_text(n_chars: int, seed: int) -> str:
    """'delimited_backcopy' (see `synthetic_text`): bigram-backcopy sentences, each ended by '.'.

    A trigger that starts a sentence has no letter before it in the sentence, so the letter
    after it is a chain draw; a trigger that ends a sentence is followed by the '.'.
    """
    rng = np.random.default_rng([seed, 1])  # its own stream: the other corpora stay as they were
    cum = [row.tolist() for row in np.cumsum(rng.dirichlet(np.full(26, 0.2), size=26), axis=1)]
    triggers = {ord(c) - ord("a") for c in TRIGGERS}
    lo, hi = SENTENCE_LETTERS
    out: list[str] = []
    size = 0
    while size < n_chars:
        length = int(rng.integers(lo, hi + 1))
        draws = rng.random(length).tolist()
        sentence = [min(int(draws[0] * 26), 25)]  # a new sentence shares nothing with the last
        for j in range(1, length):
            prev = sentence[-1]
            if prev in triggers and j >= 2:
                sentence.append(sentence[-2])  # the back-copy, inside the sentence only
            else:
                sentence.append(min(bisect.bisect_right(cum[prev], draws[j]), 25))
        out.append("".join(chr(ord("a") + c) for c in sentence) + ".")
        size += length + 1
    return "".join(out)[:n_chars]


def load_text(path: str | None = None, n_chars: int | None = None) -> tuple[str, str]:
    """(text, source): CPython's `pydoc_data.topics` (sorted by topic), a `SYNTHETIC_CORPORA`
    name (`n_chars` long; None: `SYNTHETIC_CHARS`), or a local UTF-8 file."""
    if n_chars is not None and path not in SYNTHETIC_CORPORA:
        raise ValueError(f"corpus_chars sets the length of a generated corpus only, not {path!r}")
    if path is None or path == "pydoc":
        from pydoc_data import topics  # ships with CPython; no network

        return "\n\n".join(topics.topics[k] for k in sorted(topics.topics)), "pydoc_data.topics"
    if path in SYNTHETIC_CORPORA:
        return synthetic_text(path, SYNTHETIC_CHARS if n_chars is None else n_chars), path
    file = pathlib.Path(path)
    if not file.is_file():
        names = ", ".join(("pydoc", *SYNTHETIC_CORPORA))
        raise ValueError(f"corpus must be one of {names} or a UTF-8 file; got {path!r}")
    return file.read_text(encoding="utf-8"), str(file)


def build_corpus(
    path: str | None = None,
    level: str = "char",
    val_fraction: float = 0.1,
    n_chars: int | None = None,
) -> Corpus:
    """Tokenize the corpus at `level` ('char' or 'byte') and split off the last `val_fraction`
    (`n_chars`: the length of a generated corpus, `load_text`)."""
    if level not in ("char", "byte"):
        raise ValueError(f"level must be 'char' or 'byte', got {level!r}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    text, source = load_text(path, n_chars)
    offset = len(SPECIAL_TOKENS)
    if level == "byte":
        raw = np.frombuffer(text.encode("utf-8"), np.uint8)
        ids = raw.astype(np.int32) + offset
        symbols = tuple(
            chr(b) if 32 <= b < 127 or b in (9, 10) else f"<{b:02x}>" for b in range(256)
        )
    else:
        cut = int(len(text) * (1 - val_fraction))
        # The character vocabulary comes from the training text only; unseen characters
        # in the validation text map to [UNK], as any tokenizer fitted on training data.
        symbols = tuple(sorted(set(text[:cut])))
        lookup = {s: i + offset for i, s in enumerate(symbols)}
        ids = np.fromiter((lookup.get(c, UNK) for c in text), np.int32, len(text))
    cut = int(len(ids) * (1 - val_fraction))
    return Corpus(level, symbols, ids[:cut], ids[cut:], source)


def _chunks(ids: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    return ids[starts[:, None] + np.arange(length)[None, :]]


def _random_starts(rng: np.random.Generator, ids: np.ndarray, batch: int, length: int):
    if len(ids) < length:
        raise ValueError(f"text of {len(ids)} tokens is shorter than a chunk of {length}")
    return rng.integers(0, len(ids) - length + 1, size=batch)


def _even_starts(ids: np.ndarray, batch: int, length: int, index: int, count: int):
    """Deterministic, evenly spread chunk starts for evaluation batch `index` of `count`."""
    total = batch * count
    span = len(ids) - length
    if span < 0:
        raise ValueError(f"text of {len(ids)} tokens is shorter than a chunk of {length}")
    return (np.arange(index * batch, (index + 1) * batch) * span) // max(total - 1, 1)


def mlm_batch(
    ids: np.ndarray,
    rng: np.random.Generator,
    batch: int,
    seq_len: int,
    vocab_size: int,
    mask_prob: float = 0.15,  # BERT's masking rate
    starts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """An MLM batch: tokens, segments, labels (B, T) int32 and weights (B, T) float32."""
    if seq_len < 5:
        raise ValueError(f"an encoder sequence needs seq_len >= 5, got {seq_len}")
    n_text = seq_len - 3  # [CLS] A [SEP] B [SEP]
    if starts is None:
        starts = _random_starts(rng, ids, batch, n_text)
    text = _chunks(ids, starts, n_text)
    cut = rng.integers(n_text // 4, 3 * n_text // 4 + 1, size=batch)  # length of A
    tokens = np.full((batch, seq_len), PAD, np.int32)
    pos = np.arange(seq_len)[None, :]
    a_end = cut[:, None] + 1  # positions 1..cut hold A
    tokens[:, 0] = CLS
    # text index j goes to position j + 1 (in A) or j + 2 (in B, after the first [SEP]).
    src = np.where(pos <= a_end, pos - 1, pos - 2)
    a_part = (pos >= 1) & (pos <= a_end - 1)
    b_part = (pos >= a_end + 1) & (pos <= seq_len - 2)
    text_pos = a_part | b_part
    gathered = np.take_along_axis(text, np.clip(src, 0, n_text - 1), axis=1)
    tokens = np.where(text_pos, gathered, tokens)
    tokens = np.where(pos == a_end, SEP, tokens)
    tokens[:, -1] = SEP
    segments = np.where(pos > a_end, 1, 0).astype(np.int32)
    labels = tokens.copy()
    selected = text_pos & (rng.random((batch, seq_len)) < mask_prob)
    action = rng.random((batch, seq_len))
    random_tok = rng.integers(len(SPECIAL_TOKENS), vocab_size, size=(batch, seq_len))
    inputs = np.where(selected & (action < 0.8), MASK, tokens)
    inputs = np.where(selected & (action >= 0.8) & (action < 0.9), random_tok, inputs)
    return {
        "tokens": inputs.astype(np.int32),
        "segments": segments,
        "labels": labels.astype(np.int32),
        "weights": selected.astype(np.float32),
    }


def clm_batch(
    ids: np.ndarray,
    rng: np.random.Generator,
    batch: int,
    seq_len: int,
    starts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """A causal-LM batch: `[BOS] c_0..c_{T-2}` -> `c_0..c_{T-1}`, every position weighted 1."""
    if starts is None:
        starts = _random_starts(rng, ids, batch, seq_len)
    text = _chunks(ids, starts, seq_len)
    bos = np.full((batch, 1), BOS, np.int32)
    return {
        "tokens": np.concatenate([bos, text[:, :-1]], axis=1).astype(np.int32),
        "segments": np.zeros((batch, seq_len), np.int32),
        "labels": text.astype(np.int32),
        "weights": np.ones((batch, seq_len), np.float32),
    }


def make_quant_batch(
    family: str,
    ids: np.ndarray,
    rng: np.random.Generator,
    batch: int,
    seq_len: int,
    vocab_size: int,
    starts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """`mlm_batch` for the encoder, `clm_batch` for the decoder."""
    if family == "encoder":
        return mlm_batch(ids, rng, batch, seq_len, vocab_size, starts=starts)
    if family == "decoder":
        return clm_batch(ids, rng, batch, seq_len, starts=starts)
    raise ValueError(f"family must be 'encoder' or 'decoder', got {family!r}")


def quant_eval_batches(
    family: str, ids: np.ndarray, count: int, batch: int, seq_len: int, vocab_size: int, seed: int
) -> list[dict[str, np.ndarray]]:
    """`count` fixed evaluation batches: evenly spread chunks, masks drawn from `seed`."""
    rng = np.random.default_rng(seed)
    n_text = seq_len - 3 if family == "encoder" else seq_len
    return [
        make_quant_batch(
            family,
            ids,
            rng,
            batch,
            seq_len,
            vocab_size,
            starts=_even_starts(ids, batch, n_text, i, count),
        )
        for i in range(count)
    ]


def stack_batches(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack a list of batches along a new leading axis (for `lax.scan`)."""
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}
