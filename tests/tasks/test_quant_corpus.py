"""The quant lab's corpus, batches and models: shapes, special tokens, split, taps."""

import itertools
import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks.quant import (
    MATMUL_PRECISION,
    PYDOC_CHAR_VOCAB_SIZE,
    QuantModelConfig,
    build_corpus,
    make_quant_batch,
    quant_eval_batches,
    quant_model_apply,
    quant_model_init,
    quant_tap_names,
    weight_names,
)
from tasks.quant._corpus import BOS, CLS, MASK, SEP, SPECIAL_TOKENS, TRIGGERS, synthetic_text
from tests.tasks._compile import FAST_COMPILE


@pytest.fixture(scope="module")
def corpus():
    return build_corpus()


def test_default_corpus_is_pydoc_with_a_fixed_split(corpus):
    assert corpus.source == "pydoc_data.topics"
    assert corpus.vocab_size == PYDOC_CHAR_VOCAB_SIZE  # QuantModelConfig's default
    total = len(corpus.train_ids) + len(corpus.val_ids)
    assert 400_000 < total < 600_000
    assert len(corpus.val_ids) == total - int(total * 0.9)
    again = build_corpus()
    np.testing.assert_array_equal(again.val_ids, corpus.val_ids)
    assert corpus.train_ids.min() >= len(SPECIAL_TOKENS)
    assert corpus.decode(corpus.train_ids[:200]) in build_corpus.__globals__["load_text"]()[0]
    delims = corpus.delimiter_mask()
    assert delims[: len(SPECIAL_TOKENS)].all()
    names = corpus.token_names()
    assert {
        names[i] for i in np.flatnonzero(delims[len(SPECIAL_TOKENS) :]) + len(SPECIAL_TOKENS)
    } >= {
        ".",
        ",",
        "\\n",
    }


def test_byte_level_and_local_file(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("héllo, world. " * 50, encoding="utf-8")
    c = build_corpus(str(path), level="byte")
    assert c.vocab_size == len(SPECIAL_TOKENS) + 256
    assert c.source == str(path)
    with pytest.raises(ValueError):
        build_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError):
        build_corpus(level="word")


def test_mlm_batch_layout(corpus):
    rng = np.random.default_rng(0)
    b = make_quant_batch("encoder", corpus.train_ids, rng, 64, 40, corpus.vocab_size)
    assert b["tokens"].shape == (64, 40) and b["tokens"].dtype == np.int32
    assert np.all(b["labels"][:, 0] == CLS)
    assert np.all(b["labels"][:, -1] == SEP)
    assert np.all((b["labels"] == SEP).sum(axis=1) == 2)
    first_sep = np.argmax(b["labels"] == SEP, axis=1)
    assert len(set(first_sep.tolist())) > 1  # the [SEP] moves
    seg = b["segments"]
    assert np.all(seg[np.arange(64), first_sep] == 0) and np.all(seg[:, -1] == 1)
    chosen = b["weights"] > 0
    assert np.all(b["labels"][chosen] >= len(SPECIAL_TOKENS))  # only text is predicted
    assert 0.1 < chosen.sum() / (64 * 37) < 0.2
    masked = b["tokens"] == MASK
    assert np.all(chosen[masked])
    assert 0.7 < masked.sum() / chosen.sum() < 0.9
    np.testing.assert_array_equal(b["tokens"][~chosen], b["labels"][~chosen])


def test_clm_batch_is_shifted_with_bos(corpus):
    b = make_quant_batch(
        "decoder", corpus.train_ids, np.random.default_rng(0), 4, 16, corpus.vocab_size
    )
    assert np.all(b["tokens"][:, 0] == BOS)
    np.testing.assert_array_equal(b["tokens"][:, 1:], b["labels"][:, :-1])
    assert np.all(b["weights"] == 1.0)


def test_eval_batches_are_fixed(corpus):
    a = quant_eval_batches("encoder", corpus.val_ids, 3, 4, 32, corpus.vocab_size, seed=5)
    b = quant_eval_batches("encoder", corpus.val_ids, 3, 4, 32, corpus.vocab_size, seed=5)
    for x, y in zip(a, b, strict=True):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


# No `fast_compile` mark: its one program is jitted at FAST_COMPILE, and under the mark the
# init's programs, which both families and test_bos_noise_replaces_the_first_token share, would
# be compiled under a cache key of their own (conftest.py, fast_compile) and again outside it.
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_model_shapes_taps_and_causality(family):
    cfg = QuantModelConfig(
        family=family, vocab_size=20, seq_len=12, n_layers=2, d_model=16, gate="linear"
    )
    params = quant_model_init(jax.random.key(0), cfg)
    assert set(params) == set(cfg.param_shapes())
    assert "head.w" not in weight_names(params) and "tok_emb" in weight_names(params)
    tokens = jax.random.randint(jax.random.key(1), (3, 12), 0, 20)
    # FAST_COMPILE (tests/tasks/_compile.py): shapes, and causality as exact equality of two
    # calls of one program.
    apply = jax.jit(lambda p, t: quant_model_apply(p, t, t * 0, cfg), compiler_options=FAST_COMPILE)
    logits = apply(params, tokens)
    assert logits.shape == (3, 12, 20) and logits.dtype == jnp.float32
    names = quant_tap_names(cfg)
    for n in ("emb.sum", "l0.q", "l0.scores", "l0.probs", "l0.gate", "l0.context", "l1.ffn_res"):
        assert n in names
    assert set(cfg.metric_taps()) <= set(names)
    # The paper's scripts: Table 2's max inf-norm over the encoder's FFN outputs and the
    # decoder's layer outputs; the encoder's LN inputs get an inf-norm but no kurtosis.
    kind = "ffn_out" if family == "encoder" else "ffn_res"
    assert cfg.max_inf_norm_taps() == (f"l0.{kind}", f"l1.{kind}")
    assert set(cfg.max_inf_norm_taps()) <= set(cfg.kurtosis_taps()) <= set(cfg.metric_taps())
    assert ("l0.ffn_res" in cfg.kurtosis_taps()) == (family == "decoder")
    changed = np.array(tokens)  # numpy: the checks' arithmetic is no eager program
    changed[:, 7] = (changed[:, 7] + 1) % 20
    delta = np.abs(np.asarray(apply(params, changed)) - np.asarray(logits)).max(axis=(0, 2))
    if family == "decoder":  # causal: positions before 7 cannot see the change
        assert float(delta[:7].max()) == 0.0 and float(delta[7:].min()) > 0.0
    else:  # bidirectional
        assert float(delta.min()) > 0.0


@pytest.mark.parametrize("name", ["bigram_backcopy", "trigger_induction", "uniform_backcopy"])
def test_synthetic_corpora_follow_their_rule(name):
    text = synthetic_text(name, 20_000)
    assert text == synthetic_text(name, 20_000) and set(text) <= set(string.ascii_lowercase)
    assert synthetic_text(name, 20_000, seed=1) != text
    after = [i + 1 for i in range(1, len(text) - 1) if text[i] in TRIGGERS]
    if name != "trigger_induction":
        assert all(text[i] == text[i - 2] for i in after)
        free = [c for i, c in enumerate(text[1:], 1) if text[i - 1] not in TRIGGERS]
        pairs = {a + b for a, b in itertools.pairwise(text) if a not in TRIGGERS}
        # Uniform letters fill nearly all 23 x 26 non-trigger bigrams; Dirichlet(0.2) rows do not.
        assert (len(pairs) > 0.95 * 26 * 23) == (name == "uniform_backcopy")
        counts = np.bincount([ord(c) - 97 for c in free], minlength=26)
        assert (counts.max() / counts.min() < 1.3) == (name == "uniform_backcopy")
    else:  # the letter after the previous occurrence of the letter before the trigger
        hits = 0
        for i in after:
            j = text.rfind(text[i - 2], 0, i - 2)
            expected = text[j + 1] if j >= 0 else text[i - 2]
            assert text[i] == expected
            hits += j >= 0 and text[j + 1] != text[i - 2]
        assert hits > len(after) // 2  # mostly not a back-copy
    corpus = build_corpus(name)
    assert corpus.vocab_size == len(SPECIAL_TOKENS) + 26 and corpus.source == name
    assert len(corpus.train_ids) + len(corpus.val_ids) == 400_000
    with pytest.raises(ValueError, match="corpus must be one of"):
        build_corpus("no_such_corpus")


def test_delimited_corpus_follows_its_rule():
    """Sentences of 8-12 letters ended by '.', the back-copy inside a sentence only, and a new
    sentence starting from a uniform letter (nothing crosses a '.')."""
    text = synthetic_text("delimited_backcopy", 30_000)
    assert len(text) == 30_000 and text == synthetic_text("delimited_backcopy", 30_000)
    assert synthetic_text("delimited_backcopy", 30_000, seed=1) != text
    assert set(text) == set(string.ascii_lowercase + ".")
    sentences = text.split(".")[:-1]  # the last one may be cut short
    assert {len(s) for s in sentences} == set(range(8, 13))
    copies = [(s, j) for s in sentences for j in range(2, len(s)) if s[j - 1] in TRIGGERS]
    assert copies and all(s[j] == s[j - 2] for s, j in copies)
    firsts = np.bincount([ord(s[0]) - 97 for s in sentences], minlength=26)
    inner = np.bincount([ord(c) - 97 for s in sentences for c in s[1:]], minlength=26)
    # ~100 per letter: uniform within 2x; the Dirichlet(0.2) chain inside is far from it.
    assert firsts.max() / firsts.min() < 2 < inner.max() / max(inner.min(), 1)
    corpus = build_corpus("delimited_backcopy", n_chars=5_000)
    assert len(corpus.train_ids) + len(corpus.val_ids) == 5_000
    dot = len(SPECIAL_TOKENS) + corpus.symbols.index(".")
    assert corpus.delimiter_mask()[dot] and corpus.delimiter_mask().sum() == len(SPECIAL_TOKENS) + 1
    with pytest.raises(ValueError, match="generated corpus only"):
        build_corpus(None, n_chars=5_000)


@pytest.mark.fast_compile  # a smoke test (conftest.py, _fast_compile)
@pytest.mark.parametrize(
    "family", [pytest.param("encoder", marks=pytest.mark.slow), "decoder"]
)  # the encoder's path differs only in the attention mask: -m slow
def test_bos_noise_replaces_the_first_token(family):
    """Position 0 embeds the noise at the token table's RMS scale, whatever token sits there,
    and the rest of the sequence sees it."""
    # test_model_shapes_taps_and_causality's model: the two share its init's program.
    cfg = QuantModelConfig(
        family=family, vocab_size=20, seq_len=12, n_layers=2, d_model=16, gate="linear"
    )
    params = quant_model_init(jax.random.key(0), cfg)
    tokens = jax.random.randint(jax.random.key(1), (2, 12), BOS + 1, 20).at[:, 0].set(BOS)
    noise = jax.random.normal(jax.random.key(2), (2, 16))
    first = "emb.tok_seg" if family == "encoder" else "emb.sum"

    @jax.jit  # one program with the noise and one without, not one per operation
    def apply_and_tap(p, noise_BxD):
        seen = {}

        def record(name, x):
            seen[name] = x
            return x

        logits = quant_model_apply(p, tokens, tokens * 0, cfg, tap=record, bos_noise_BxD=noise_BxD)
        return logits, seen[first]

    def apply(p, noise_BxD):
        return apply_and_tap(p, noise_BxD)[0]

    logits, embedded = apply_and_tap(params, noise)
    rms = jnp.sqrt(jnp.mean(jnp.square(params["tok_emb"])))
    added = params["seg_emb"][0] if family == "encoder" else params["pos_emb"][0]
    expected = noise * rms + added[None, :]
    np.testing.assert_allclose(embedded[:, 0], expected, rtol=1e-6, atol=1e-7)
    # A sign flip of the learned [BOS] row (the table's RMS stays): unused under the noise.
    # (The comparisons in numpy, exact: no eager program per operation.)
    flipped = np.array(params["tok_emb"])
    flipped[BOS] *= -1.0
    moved = {**params, "tok_emb": flipped}
    assert np.array_equal(apply(moved, noise), logits)
    assert not np.array_equal(apply(moved, None), apply(params, None))
    delta = np.abs(np.asarray(apply(params, -np.asarray(noise))) - np.asarray(logits))
    delta = delta.max(axis=(0, 2))
    assert float(delta.min()) > 0  # every position attends to position 0


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_every_dot_forward_and_backward_is_highest(family):
    """float32 products as float32 on any backend (not TF32 on a GPU): `MATMUL_PRECISION`."""
    cfg = QuantModelConfig(family=family, vocab_size=20, seq_len=8, n_layers=1, d_model=16,
                           gate="mlp")  # fmt: skip
    # The parameters' shapes only: the jaxpr is traced, nothing runs (no init to compile).
    params = jax.eval_shape(lambda: quant_model_init(jax.random.key(0), cfg))
    tokens = jnp.zeros((2, 8), jnp.int32)

    def loss(p):
        return jnp.sum(quant_model_apply(p, tokens, tokens, cfg, -0.025, 1.0))

    text = str(jax.make_jaxpr(jax.grad(loss))(params))
    dots = text.count("dot_general[")
    assert MATMUL_PRECISION == "highest" and dots > 10
    assert text.count("precision=(Precision.HIGHEST, Precision.HIGHEST)") == dots
