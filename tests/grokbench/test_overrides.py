"""The one `key=value` parser (`grokbench.overrides`): the forms it accepts and its one-line
errors, for every reader its callers (config, sweep, the quant lab) build."""

import pytest

from grokbench import overrides, sweep
from grokbench.config import ConfigError, parse_overrides
from grokbench.quant import parse_quant_overrides

READERS = {
    "steps": overrides.typed(int),
    "eps": overrides.typed(float),
    "layer_norm": overrides.typed(bool),
    "loss": overrides.typed(str),
    "d_mlp": overrides.typed(int | None),
    "bits": overrides.typed(str, whole=True),
    "seeds": overrides.count,
    "families": overrides.choices(("encoder", "decoder")),
    "family": overrides.refused("use families=... to choose families"),
}


def _error(call, *args, **kwargs) -> str:
    """The one-line message of the `ConfigError` that `call(*args, **kwargs)` raises."""
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([], {}),
        (["steps=200"], {"steps": (200,)}),
        ([" steps =200"], {"steps": (200,)}),  # the key is stripped
        (["eps=1e-8, 1e-12"], {"eps": (1e-8, 1e-12)}),  # each value too
        (["eps=1e-8,1e-8,0"], {"eps": (1e-8, 0.0)}),  # distinct values, in order
        (["layer_norm=true,no,1,FALSE"], {"layer_norm": (True, False)}),
        (["loss=fixed,standard"], {"loss": ("fixed", "standard")}),
        (["d_mlp=none"], {"d_mlp": (None,)}),
        (["d_mlp=256,null"], {"d_mlp": (256, None)}),
        (["bits=W8A8,W6A6"], {"bits": ("W8A8,W6A6",)}),  # whole: one value with a comma
        (["seeds=3"], {"seeds": (3,)}),
        (["families=decoder,,encoder"], {"families": ("decoder", "encoder")}),
        (["steps=1", "seeds=2"], {"steps": (1,), "seeds": (2,)}),
    ],
)
def test_accepted_forms(tokens, expected):
    parsed = overrides.parse(tokens, READERS)
    assert parsed == expected
    types = {k: [type(v) for v in values] for k, values in parsed.items()}
    assert types == {k: [type(v) for v in values] for k, values in expected.items()}


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["steps"], "expected key=value, got 'steps'"),
        (["=3"], "expected key=value, got '=3'"),
        (["steps=1", "steps=2"], "key 'steps' given twice"),
        (["foo=1"], "unknown key 'foo'; known keys: " + ", ".join(READERS)),
        (["steps=1e4"], "steps='1e4': expected int"),
        (["steps=1.5"], "steps='1.5': expected int"),
        (["eps=nan"], "eps='nan': expected float"),
        (["eps=1e-8,"], "eps='': expected float"),  # without check_lists: the value's type
        (["layer_norm=maybe"], "layer_norm='maybe': expected bool"),
        (["loss="], "loss='': expected str"),
        (["d_mlp=wide"], "d_mlp='wide': expected int or NoneType"),
        (["seeds=0"], "seeds must be >= 1, got 0"),
        (["seeds=1,2"], "seeds='1,2': expected a positive int"),
        (
            ["families=decoder,mlp"],
            "families must be a comma list of encoder, decoder; got 'decoder,mlp'",
        ),
        (["families=,"], "families must be a comma list of encoder, decoder; got ','"),
        (["family=decoder"], "use families=... to choose families"),
    ],
)
def test_errors_are_one_line(tokens, message):
    assert _error(overrides.parse, tokens, READERS) == message


def test_known_names_the_keys_of_the_unknown_key_message():
    message = _error(overrides.parse, ["x=1"], READERS, known=["a", "b"])
    assert message == "unknown key 'x'; known keys: a, b"


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["eps="], "eps= lists no values"),
        (["eps=  "], "eps= lists no values"),
        (["eps= , "], "'eps= , ': an empty value in the list"),
        (["eps=1e-8,"], "'eps=1e-8,': an empty value in the list"),
        (["foo=1,,2"], "'foo=1,,2': an empty value in the list"),  # any key, known or not
        (["foo=1", "eps="], "eps= lists no values"),  # before any other error
        (["steps", "eps="], "eps= lists no values"),
    ],
)
def test_check_lists_comes_first(tokens, message):
    assert _error(overrides.parse, tokens, READERS, check_lists=True) == message


def test_first_keys_are_read_in_a_pass_of_their_own():
    first = {"first": ["families"]}
    # The later `families` error comes before the earlier `steps` one, and the duplicate
    # `steps` is found only after every `families` was read.
    families = "families must be a comma list of encoder, decoder; got 'mlp'"
    assert _error(overrides.parse, ["steps=x", "families=mlp"], READERS, **first) == families
    twice = ["steps=1", "steps=2", "families=mlp"]
    assert _error(overrides.parse, twice, READERS, **first) == families
    # Without `first`, token order decides.
    assert _error(overrides.parse, ["steps=x", "families=mlp"], READERS).startswith("steps=")
    # A malformed token fails in the first pass, and the first keys come first in the result.
    malformed = _error(overrides.parse, ["steps=x", "eps"], READERS, **first)
    assert malformed == "expected key=value, got 'eps'"
    parsed = overrides.parse(["steps=1", "families=decoder"], READERS, **first)
    assert list(parsed) == ["families", "steps"]


def test_each_caller_keeps_its_reading():
    """`figures --set` (config), `run` and `sweep` (sweep: check_lists), `quant`."""
    assert _error(parse_overrides, ["eps=1e-8,"]) == "eps='': expected float"
    empty = "'eps=1e-8,': an empty value in the list"
    assert _error(sweep.expand_grid, "fig4", ["eps=1e-8,"]) == empty
    assert _error(parse_overrides, ["nope=1"]).startswith(
        "unknown key 'nope'; known keys: task, p, "
    )
    assert _error(parse_overrides, ["nope=1"]).endswith(", seeds")
    assert parse_overrides(["seeds=2", "p=7"]) == {"seeds": (2,), "p": (7,)}
    # The quant lab: no seeds; variants and families are read first; variant is refused.
    no_seeds = _error(parse_quant_overrides, ["seeds=2"])
    assert no_seeds.startswith("unknown key 'seeds'; known keys: variants, families, ")
    refused = _error(parse_quant_overrides, ["steps=x", "variant=gated"])
    assert refused == "use variants=... to choose variants"
    bad = _error(parse_quant_overrides, ["steps=1", "steps=2", "variants=bogus"])
    assert bad.startswith("variants must be a comma list of ")
    parsed = parse_quant_overrides(["alpha=2", "zeta=1,2", "variants=gated", "bits=W8A8,W4A8"])
    assert parsed == {"variants": ("gated",), "alpha": 2.0, "zeta": (1.0, 2.0), "bits": "W8A8,W4A8"}
    assert list(parsed) == ["variants", "alpha", "zeta", "bits"]
