"""The exact test: a spanning forest of the text's tokens, and a binomial tail valid for every text."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import binom, chisquare

from chainmark.significance import TESTS, binomial_p_value, p_value, spanning_forest, z_score
from chainmark.detection import detect, detect_batch, valid_transitions
from chainmark.config import ChainMarkConfig
from chainmark.auditor.regime import Regime, RegimeError, regime_document
from chainmark.topology import resolve_topology

#: A repetitive "text": a loop of a few tokens, repeated phrases, tokens revisited in both directions.
REPETITIVE = np.array([5, 6, 7, 5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 7, 6, 5, 12, 5, 6, 7] * 6 + [13, 14, 13, 14],
                      dtype=np.int64)
CONFIG = ChainMarkConfig(b"k" * 16)  # S = 5, the clockwork


def union_find_forest(ids) -> np.ndarray:
    """The forest by its definition: keep a transition when it joins two tokens not yet connected."""
    ids = [int(t) for t in ids]
    mask = np.zeros(max(len(ids) - 1, 0), dtype=bool)
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for i in range(len(ids) - 1):
        a, b = find(ids[i]), find(ids[i + 1])
        if a != b:
            parent[a] = b
            mask[i] = True
    return mask


def test_the_forest_is_the_union_find_forest_of_the_text():
    rng = np.random.default_rng(0)
    for _ in range(500):
        ids = rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(0, 120)))
        forest = spanning_forest(ids)
        assert np.array_equal(forest, union_find_forest(ids))
        if ids.size >= 2:  # a walk connects every token it visits: a spanning tree, distinct - 1 edges
            assert forest.sum() == len(np.unique(ids)) - 1
    assert spanning_forest([]).shape == (0,) and spanning_forest([3]).shape == (0,)
    assert spanning_forest([4, 4, 4]).tolist() == [False, False]


def test_the_forest_comes_from_the_text_alone_never_from_the_key():
    masks = {key: detect(REPETITIVE, ChainMarkConfig(key), test="exact").scored_mask for key in (b"a" * 16, b"b" * 16)}
    assert np.array_equal(masks[b"a" * 16], masks[b"b" * 16])
    assert np.array_equal(masks[b"a" * 16], spanning_forest(REPETITIVE))


@pytest.mark.parametrize("topology,S", [("clockwork", 5), ("soft_cycle", 5), ("clockwork", 3)])
def test_the_legal_count_on_the_forest_is_binomial_under_random_states(topology, S):
    """Random states for the distinct tokens (what a random key gives): the count over the forest
    follows Binomial(m, k/S); the test would fail for a law off by a few percent."""
    topo = resolve_topology(topology, S)
    _, tokens = np.unique(REPETITIVE, return_inverse=True)
    forest = spanning_forest(REPETITIVE)
    m = int(forest.sum())
    rng = np.random.default_rng(7)
    draws = 40_000
    states = rng.integers(0, S, (draws, tokens.max() + 1))[:, tokens]
    counts = valid_transitions(states, topo)[:, forest].sum(axis=1)
    expected = binom.pmf(np.arange(m + 1), m, topo.p0) * draws
    observed = np.bincount(counts, minlength=m + 1).astype(float)
    keep = expected >= 5  # pool the thin tails into their neighbours
    obs, exp = observed[keep], expected[keep]
    if (~keep).any():
        obs, exp = np.append(obs, observed[~keep].sum()), np.append(exp, expected[~keep].sum())
    exp *= obs.sum() / exp.sum()  # chisquare wants equal totals
    assert chisquare(obs, exp).pvalue > 1e-4
    assert abs(counts.mean() - m * topo.p0) < 4 * np.sqrt(m * topo.p0 * (1 - topo.p0) / draws)


def test_the_exact_test_holds_alpha_on_a_repetitive_text_where_the_z_test_does_not():
    topo = resolve_topology("clockwork", 5)
    _, tokens = np.unique(REPETITIVE, return_inverse=True)
    forest = spanning_forest(REPETITIVE)
    m, n = int(forest.sum()), REPETITIVE.size
    rng = np.random.default_rng(11)
    draws, alpha = 20_000, 0.01
    states = rng.integers(0, 5, (draws, tokens.max() + 1))[:, tokens]
    valid = valid_transitions(states, topo)
    c = valid[:, forest].sum(axis=1)
    exact = np.mean([binomial_p_value(int(k), m, 0.2) < alpha for k in c])
    z = np.mean([p_value(z_score(v / (n - 1), 0.2, n - 1)) < alpha for v in valid.sum(axis=1)])
    upper = binom.ppf(0.999, draws, alpha) / draws  # an FPR of alpha stays below this in 999 of 1000 runs
    assert exact <= upper
    assert z > 2 * alpha  # the drift the exact test removes: repeated pairs and cycles


def test_the_exact_test_holds_alpha_under_real_keys():
    """The same guarantee through the keyed hash (300 keys; a small vocabulary keeps the tables cheap)."""
    configs = [ChainMarkConfig(f"key-{i:04d}-exact-test".encode()) for i in range(300)]
    flags = [detect(REPETITIVE, config, test="exact", vocab_size=64).is_watermarked for config in configs]
    assert np.mean(flags) <= binom.ppf(0.999, 300, 0.01) / 300


def test_exact_p_value_is_the_binomial_tail_and_decides():
    res = detect(REPETITIVE, CONFIG, test="exact", alpha=0.05)
    m, c = res.n_scored, res.n_hits
    assert m == len(np.unique(REPETITIVE)) - 1
    assert res.p_value == pytest.approx(binom.sf(c - 1, m, 0.2))
    assert res.is_watermarked == (res.p_value < 0.05)
    assert res.z == pytest.approx(z_score(c / m, 0.2, m))
    assert binomial_p_value(0, 0, 0.2) == 1.0 and binomial_p_value(0, 5, 0.2) == 1.0
    assert detect([1], CONFIG, test="exact").p_value == 1.0


def test_watermarked_walks_are_found_by_the_exact_test():
    from cmlab.harness.grids import _simulate_watermarked_ids

    ids = _simulate_watermarked_ids(50, 200, ChainMarkConfig(b"w" * 16, S=5, rho=0.5), vocab_size=4096, seed=3)
    found = [detect(row, ChainMarkConfig(b"w" * 16, S=5), test="exact", vocab_size=4096).is_watermarked for row in ids]
    assert np.mean(found) > 0.9


def test_test_names_and_conflicts_are_checked():
    assert TESTS == ("z", "distinct", "exact")
    with pytest.raises(ValueError, match="test must be one of"):
        detect(REPETITIVE, CONFIG, test="binomial")
    with pytest.raises(TypeError, match="distinct_pairs"):  # one spelling: test="distinct"
        detect(REPETITIVE, CONFIG, distinct_pairs=True, test="z")


def test_detect_batch_runs_the_exact_test_on_every_row():
    rows = np.stack([REPETITIVE, REPETITIVE[::-1]])
    batch = detect_batch(rows, CONFIG, test="exact")
    for row, res in zip(rows, batch):
        assert res.p_value == detect(row, CONFIG, test="exact").p_value
    ragged = detect_batch([REPETITIVE[:50], REPETITIVE], CONFIG, test="exact")
    assert ragged[0].n_scored == len(np.unique(REPETITIVE[:50])) - 1


def test_a_regime_records_the_exact_test_and_decides_by_its_p_value():
    doc = regime_document(b"k" * 16, Regime(S=5, alpha=0.01, test="exact"))
    assert doc["test"] == "exact" and doc["threshold"] is None
    regime = Regime.from_document(json.loads(json.dumps(doc)))
    assert regime.exact and regime.effective_test == "exact"
    res = detect(REPETITIVE, regime.config(b"k" * 16), alpha=regime.alpha, test=regime.effective_test)
    assert regime.decide(res) == (res.p_value < 0.01)
    assert "test" not in regime_document(b"k" * 16, Regime(S=5, alpha=0.01))  # older documents stay as they were
    with pytest.raises(RegimeError, match="exact test decides by its p-value"):
        Regime(test="exact", threshold=2.0)
    # a test named on the command line replaces the document's test and its threshold
    z_doc = regime_document(b"k" * 16, Regime(S=5, alpha=0.01, test="distinct"))
    assert Regime.resolve(z_doc, test="exact").threshold is None
    assert Regime.resolve(z_doc, test="exact").effective_test == "exact"


def test_the_command_line_runs_the_exact_test_and_publishes_it(tmp_path, capsys, monkeypatch):
    from chainmark import cli
    from chainmark.auditor.keyfiles import _KEY_ENV, KEY_FILE_ENV

    monkeypatch.delenv(_KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    key, text, regime = tmp_path / "k.key", tmp_path / "t.txt", tmp_path / "r.json"
    text.write_text("for i in range(10):\n    print(i)\n" * 20, "utf-8")
    assert cli.main(["keygen", "--out", str(key)]) == 0
    capsys.readouterr()
    assert cli.main(["detect", "--key-file", str(key), "--test", "exact", "--json", str(text)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["test"] == "exact" and row["threshold"] is None
    assert row["is_watermarked"] == (row["p_value"] < row["alpha"])
    assert row["n_transitions"] < row["n_tokens"] - 1  # the forest drops the repeats
    assert cli.main(["detect", "--key-file", str(key), "--test", "exact", str(text)]) == 0
    assert "exact binomial test" in capsys.readouterr().out
    assert cli.main(["regime", "--key-file", str(key), "--S", "5", "--alpha", "0.01", "--test", "exact",
                     "--out", str(regime)]) == 0
    capsys.readouterr()
    assert json.loads(regime.read_text("utf-8"))["test"] == "exact"
    assert cli.main(["detect", "--key-file", str(key), "--regime", str(regime), "--json", str(text)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["test"] == "exact"
    assert cli.main(["detect", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    # the guarantee as it is: per text, over a random key; a deployed key's rate is the key audit's to measure
    assert "size is at most alpha for every text, repetitive ones included, over a random key" in help_text
    assert "chainmark key audit" in help_text and "an approximation" in help_text
    assert cli.main(["detect", "--key-file", str(key), "--test", "binomial", str(text)]) == 2
