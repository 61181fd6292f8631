"""Every public function rejects bad parameters with a clear error.

Each case names the call, the exception type (ValueError for a value out of
range, TypeError for a value of the wrong type) and words the message must
contain: the parameter's name and the allowed range, so the user knows what
to change. Gaps this audit found (z_score's p0, id lists straddling 2**63,
non-integer offsets, temperature) have been fixed in their modules; the
cases here keep them fixed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cmlab.comparison import adversary, attacks
from cmlab.comparison import baselines
from chainmark.checks import check_alpha
from chainmark.detection import detect, detect_batch, detect_text, score_states
from chainmark.significance import log_p_value, p_value, z_score
from cmlab.comparison.lrdetect import lr_detect
from chainmark.config import ChainMarkConfig
from chainmark.embed import ChainMarkLogitsProcessor, Sampling, generate
from chainmark.gates import Gate
from chainmark.checks import check_rho
from chainmark.partition import as_token_array, state_of, state_table, states_of
from chainmark.topology import Topology, resolve_topology
from cmlab.stats import lifted_threshold

KEY = b"validation-key"
CONFIG = ChainMarkConfig(KEY)  # what the lab's keyed wrappers take: the key with S = 5 and the clockwork
IRREGULAR = np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]])


class ByteTokenizer:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text.encode("utf-8"))}

    def __len__(self):
        return 256


def _processor_call_with_wrong_width():
    config = ChainMarkConfig(KEY, S=5, rho=1.0, gate="all")
    processor = ChainMarkLogitsProcessor(config, vocab_size=100)
    processor(torch.zeros((1, 3), dtype=torch.long), torch.zeros((1, 200)))


CASES = [
    # ---- partition ---------------------------------------------------------
    ("state_of S=1", lambda: state_of(1, KEY, 1), ValueError, ["S", ">= 2"]),
    ("state_of S=2.5", lambda: state_of(1, KEY, 2.5), TypeError, ["S", ">= 2"]),
    ("state_of S=True", lambda: state_of(1, KEY, True), TypeError, ["S"]),
    ("state_of negative id", lambda: state_of(-1, KEY, 5), ValueError, ["token_id", "[0, 2**64 - 1]"]),
    ("state_of id 2**64", lambda: state_of(2**64, KEY, 5), ValueError, ["token_id", "[0, 2**64 - 1]"]),
    ("state_of key int", lambda: state_of(1, 12345, 5), TypeError, ["key", "bytes"]),
    ("state_table vocab 0", lambda: state_table(KEY, 0, 5), ValueError, ["vocab_size", "[1,"]),
    ("state_table vocab 1.5", lambda: state_table(KEY, 1.5, 5), TypeError, ["vocab_size"]),
    ("state_table S=1", lambda: state_table(KEY, 10, 1), ValueError, ["S", ">= 2"]),
    ("states_of negative", lambda: states_of([1, -2], KEY, 5), ValueError, ["token_ids", "non-negative"]),
    ("states_of id >= vocab", lambda: states_of([1, 70000], KEY, 5, vocab_size=49152), ValueError,
     ["token_ids", "[0, 49151]"]),
    ("states_of 2-D", lambda: states_of([[1, 2]], KEY, 5), ValueError, ["token_ids", "one-dimensional"]),
    ("states_of text", lambda: states_of("some text", KEY, 5), TypeError, ["token_ids"]),
    ("states_of floats", lambda: states_of([1.5, 2.0], KEY, 5), TypeError, ["token_ids", "integers"]),
    ("states_of id > 2**64-1", lambda: states_of([2**64], KEY, 5), ValueError, ["token_ids", "2**64 - 1"]),
    # ---- topology ----------------------------------------------------------
    ("clockwork S=1", lambda: Topology.clockwork(1), ValueError, ["S", ">= 2"]),
    ("clockwork S=0.5", lambda: Topology.clockwork(0.5), TypeError, ["S"]),
    ("soft_cycle S=2", lambda: Topology.soft_cycle(2), ValueError, ["S >= 3"]),
    ("matrix k = S", lambda: Topology.from_matrix(np.ones((3, 3), dtype=int)), ValueError, ["k", "[1, 2]"]),
    ("matrix k = 0", lambda: Topology.from_matrix(np.zeros((3, 3), dtype=int)), ValueError, ["k", "[1, 2]"]),
    ("matrix irregular", lambda: Topology.from_matrix(IRREGULAR), ValueError, ["k-regular"]),
    ("matrix not square", lambda: Topology.from_matrix(np.ones((2, 3))), ValueError, ["square"]),
    ("matrix not 0/1", lambda: Topology.from_matrix(np.full((3, 3), 2)), ValueError, ["0 and 1"]),
    ("offsets zero", lambda: Topology.from_offsets(5, [0]), ValueError, ["offsets", "0"]),
    ("offsets empty", lambda: Topology.from_offsets(5, []), ValueError, ["offsets"]),
    ("offsets float", lambda: Topology.from_offsets(5, [1.5]), TypeError, ["offsets", "integers"]),
    ("resolve unknown", lambda: resolve_topology("spiral", 5), ValueError, ["topology", "clockwork", "soft_cycle"]),
    ("resolve other S", lambda: resolve_topology(Topology.clockwork(4), 5), ValueError, ["S = 4", "S = 5"]),
    ("successors bad state", lambda: Topology.clockwork(5).successors(7), ValueError, ["state", "[0, 4]"]),
    # ---- gates -------------------------------------------------------------
    ("check_rho 1.5", lambda: check_rho(1.5), ValueError, ["rho", "[0, 1]"]),
    ("check_rho -0.1", lambda: check_rho(-0.1), ValueError, ["rho", "[0, 1]"]),
    ("check_rho nan", lambda: check_rho(float("nan")), ValueError, ["rho", "[0, 1]"]),
    ("check_rho str", lambda: check_rho("0.5"), TypeError, ["rho", "[0, 1]"]),
    ("gate kind", lambda: Gate("median", 0.0), ValueError, ["gate", "high_entropy", "top2_gap"]),
    ("gate tau nan", lambda: Gate("high_entropy", float("nan")), ValueError, ["tau", "NaN"]),
    ("gate tau str", lambda: Gate("high_entropy", "1.0"), TypeError, ["tau", "number"]),
    ("calibrate rho 1.2", lambda: Gate.calibrate("high_entropy", 1.2, [1.0, 2.0]), ValueError, ["rho", "[0, 1]"]),
    ("calibrate empty pilot", lambda: Gate.calibrate("high_entropy", 0.5, []), ValueError, ["pilot_signal"]),
    ("calibrate all rho", lambda: Gate.calibrate("all", 0.5, [1.0]), ValueError, ["rho", "1"]),
    ("gate rate empty", lambda: Gate("high_entropy", 1.0).rate([]), ValueError, ["signal"]),
    # ---- detect ------------------------------------------------------------
    ("detect a bare key", lambda: detect([1, 2], KEY, test="z"), TypeError, ["pass ChainMarkConfig(key, S=", "got bytes"]),
    ("detect a key with S", lambda: detect([1, 2], KEY, 5, "clockwork", test="z"), TypeError, ["ChainMarkConfig", "bytes"]),
    ("detect a config with S", lambda: detect([1, 2], CONFIG, S=5, test="z"), TypeError, ["got ChainMarkConfig and S"]),
    ("detect key keyword", lambda: detect([1, 2], key=KEY, test="z"), TypeError, ["got NoneType and key"]),
    ("detect alpha 0", lambda: detect([1, 2], CONFIG, alpha=0.0, test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect alpha 1", lambda: detect([1, 2], CONFIG, alpha=1.0, test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect alpha 1.5", lambda: detect([1, 2], CONFIG, alpha=1.5, test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect alpha nan", lambda: detect([1, 2], CONFIG, alpha=float("nan"), test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect alpha str", lambda: detect([1, 2], CONFIG, alpha="0.01", test="z"), TypeError, ["alpha", "(0, 1)"]),
    ("detect alpha on empty input", lambda: detect([], CONFIG, alpha=2.0, test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect negative ids", lambda: detect([1, -2], CONFIG, test="z"), ValueError, ["token_ids", "non-negative"]),
    ("detect id >= vocab", lambda: detect([1, 50000], CONFIG, vocab_size=49152, test="z"), ValueError,
     ["token_ids", "[0, 49151]"]),
    ("detect key int", lambda: detect([1, 2], 12345, test="z"), TypeError, ["ChainMarkConfig", "got int"]),
    ("detect no config on empty input", lambda: detect([], None, test="z"), TypeError, ["pass the ChainMarkConfig"]),
    ("detect test bool", lambda: detect([1, 2], CONFIG, test=True), ValueError, ["test must be one of"]),
    ("detect 3-D", lambda: detect(np.zeros((2, 2, 2), dtype=int), CONFIG, test="z"), ValueError, ["token_ids"]),
    ("detect 2-D", lambda: detect(np.zeros((2, 3), dtype=int), CONFIG, test="z"), ValueError, ["token_ids", "detect_batch"]),
    ("detect list of lists", lambda: detect([[1, 2], [3, 4]], CONFIG, test="z"), ValueError, ["token_ids", "detect_batch"]),
    ("detect 2-D tensor", lambda: detect(torch.zeros((2, 3), dtype=torch.long), CONFIG, test="z"), ValueError,
     ["token_ids", "detect_batch"]),
    ("detect scalars and rows mixed", lambda: detect([1, [2, 3]], CONFIG, test="z"), ValueError, ["token_ids", "flat"]),
    # ---- detect_batch --------------------------------------------------------
    ("detect_batch 1-D", lambda: detect_batch(np.arange(5), CONFIG, test="z"), ValueError, ["batch", "2-D", "detect"]),
    ("detect_batch list of ids", lambda: detect_batch([1, 2, 3], CONFIG, test="z"), TypeError, ["batch", "detect"]),
    ("detect_batch not iterable", lambda: detect_batch(5, CONFIG, test="z"), TypeError, ["batch"]),
    ("detect_batch text", lambda: detect_batch("some text", CONFIG, test="z"), TypeError, ["batch", "tokenize"]),
    ("detect_batch negative id", lambda: detect_batch([[1, 2], [-3]], CONFIG, test="z"), ValueError,
     ["token_ids", "non-negative"]),
    ("detect_batch id >= vocab", lambda: detect_batch(np.array([[1, 50000]]), CONFIG, vocab_size=49152, test="z"), ValueError,
     ["token_ids", "[0, 49151]"]),
    ("detect_batch floats", lambda: detect_batch(np.ones((2, 3)), CONFIG, test="z"), TypeError, ["token_ids", "integers"]),
    ("detect_batch alpha", lambda: detect_batch([], CONFIG, alpha=0.0, test="z"), ValueError, ["alpha", "(0, 1)"]),
    ("detect_batch a bare key", lambda: detect_batch([], KEY, test="z"), TypeError, ["detect_batch", "ChainMarkConfig"]),
    ("detect_batch loose topology", lambda: detect_batch([], CONFIG, topology="clockwork", test="z"), TypeError,
     ["got ChainMarkConfig and topology"]),
    # ---- the one id normaliser, at every call site ----------------------------
    ("lr_detect 2-D", lambda: lr_detect([[1, 2]], CONFIG, []), ValueError, ["token_ids", "one-dimensional"]),
    ("lr_detect negative id", lambda: lr_detect([1, -2], CONFIG, [0.5]), ValueError, ["token_ids", "non-negative"]),
    ("substitute 2-D", lambda: attacks.Substitution(0.5, 10).edit([[1, 2]]), ValueError,
     ["token_ids", "one-dimensional"]),
    ("substitute floats", lambda: attacks.Substitution(0.5, 10).edit([1.5, 2.0]), TypeError, ["token_ids", "integers"]),
    ("delete negative id", lambda: attacks.Deletion(0.5).edit([1, -2]), ValueError, ["token_ids", "non-negative"]),
    ("keyed_scrub id >= vocab", lambda: adversary.keyed_scrub([1, 100], CONFIG, 100), ValueError,
     ["token_ids", "[0, 99]"]),
    ("kgw_detect negative id", lambda: baselines.kgw_detect([1, -2], baselines.KGWConfig(KEY), 100), ValueError,
     ["token_ids", "non-negative"]),
    ("kgw_detect id >= vocab", lambda: baselines.kgw_detect([1, 100], baselines.KGWConfig(KEY), 100), ValueError,
     ["token_ids", "[0, 99]", "outside the vocabulary"]),
    ("kgw_detect floats", lambda: baselines.kgw_detect([1.5, 2.7], baselines.KGWConfig(KEY), 100), TypeError,
     ["token_ids", "integers"]),
    ("kgw_detect 2-D", lambda: baselines.kgw_detect([[1, 2], [3, 4]], baselines.KGWConfig(KEY), 100), ValueError,
     ["token_ids", "one-dimensional"]),
    ("green_mask bools", lambda: baselines._green_mask([True, False], baselines.KGWConfig(KEY), 100), TypeError,
     ["token_ids", "integers"]),
    ("sweet_detect text", lambda: baselines._sweet_detect("abc", baselines.SweetConfig(KEY), 100, [0.0] * 3),
     TypeError, ["token_ids", "tokenize"]),
    ("detect_text bytes", lambda: detect_text(b"bytes", ByteTokenizer(), CONFIG, test="z"), TypeError, ["text", "str"]),
    ("detect_text a key with S", lambda: detect_text("x", ByteTokenizer(), KEY, S=5, test="z"), TypeError,
     ["detect_text", "pass ChainMarkConfig(key, S="]),
    ("detect_text id >= vocab", lambda: detect_text("\u00e9t\u00e9", ByteTokenizer(), CONFIG, vocab_size=100, test="z"),
     ValueError, ["token_ids", "[0, 99]"]),
    ("score_states out of range", lambda: score_states(np.array([0, 7]), Topology.clockwork(5)), ValueError,
     ["states", "[0, 4]"]),
    ("score_states topology str", lambda: score_states(np.array([0, 1]), "clockwork"), TypeError, ["topology"]),
    ("score_states irregular",
     lambda: score_states(np.array([0, 1]), Topology.from_matrix(IRREGULAR, allow_irregular=True)), ValueError,
     ["k-regular"]),
    ("score_states scored shape", lambda: score_states(np.array([0, 1, 2]), Topology.clockwork(5),
                                                       scored=np.ones(5, dtype=bool)), ValueError, ["scored"]),
    ("check_alpha -1", lambda: check_alpha(-1), ValueError, ["alpha", "(0, 1)"]),
    ("z_score p0 = 0", lambda: z_score(0.5, 0.0, 10), ValueError, ["p0", "(0, 1)"]),
    ("z_score p0 = 1.5", lambda: z_score(0.5, 1.5, 10), ValueError, ["p0", "(0, 1)"]),
    ("z_score phi = 2", lambda: z_score(2.0, 0.2, 10), ValueError, ["phi", "[0, 1]"]),
    ("z_score phi = -0.1", lambda: z_score(-0.1, 0.2, 10), ValueError, ["phi", "[0, 1]"]),
    ("z_score phi nan", lambda: z_score(float("nan"), 0.2, 10), ValueError, ["phi", "[0, 1]"]),
    ("z_score phi str", lambda: z_score("0.5", 0.2, 10), TypeError, ["phi", "[0, 1]"]),
    ("z_score n = -1", lambda: z_score(0.5, 0.2, -1), ValueError, ["n_transitions", ">= 0"]),
    ("z_score n = 2.5", lambda: z_score(0.5, 0.2, 2.5), TypeError, ["n_transitions", "integer"]),
    ("p_value nan", lambda: p_value(float("nan")), ValueError, ["z", "NaN"]),
    ("p_value str", lambda: p_value("3"), TypeError, ["z", "number"]),
    ("log_p_value nan", lambda: log_p_value(float("nan")), ValueError, ["z", "NaN"]),
    # ---- attacks -----------------------------------------------------------
    ("n_edits n = -1", lambda: attacks.n_edits(0.5, -1), ValueError, ["n", ">= 0"]),
    ("n_edits n = 2.5", lambda: attacks.n_edits(0.5, 2.5), TypeError, ["n", "integer"]),
    ("random_walk_text n = 0", lambda: adversary.random_walk_text(0, CONFIG, 100), ValueError, ["n", ">= 1"]),
    ("random_walk_text n = -1", lambda: adversary.random_walk_text(-1, CONFIG, 100), ValueError, ["n", ">= 1"]),
    ("random_walk_text n = 3.0", lambda: adversary.random_walk_text(3.0, CONFIG, 100), TypeError, ["n", ">= 1"]),
    ("keyed_scrub id >= vocab", lambda: adversary.keyed_scrub([1, 2, 150, 3], CONFIG, 100), ValueError,
     ["token_ids", "[0, 99]", "150", "100"]),
    ("keyed_forge id >= vocab", lambda: adversary.keyed_forge([1, 100], CONFIG, 100), ValueError,
     ["token_ids", "[0, 99]", "100"]),
    ("keyed_scrub bare key", lambda: adversary.keyed_scrub([1, 2], KEY, 100), TypeError,
     ["keyed_scrub takes one ChainMarkConfig", "pass ChainMarkConfig(key, S=", "got bytes"]),
    ("keyed_forge loose S", lambda: adversary.keyed_forge([1, 2], CONFIG, 100, S=5), TypeError,
     ["ChainMarkConfig and S"]),
    ("random_walk_text bare key", lambda: adversary.random_walk_text(5, KEY, 100), TypeError,
     ["random_walk_text takes one ChainMarkConfig", "got bytes"]),
    ("lr_detect bare key", lambda: lr_detect([1, 2], KEY, [0.5]), TypeError,
     ["lr_detect takes one ChainMarkConfig", "pass ChainMarkConfig(key, S=", "got bytes"]),
    ("lr_detect loose topology", lambda: lr_detect([1, 2], CONFIG, [0.5], topology="clockwork"), TypeError,
     ["ChainMarkConfig and topology"]),
    ("keyed_forge candidate >= vocab",
     lambda: adversary.keyed_forge(list(range(20)), CONFIG, 100, candidates=lambda j: [500]), ValueError,
     ["candidates", "500", "vocab_size = 100"]),
    # ---- baselines ---------------------------------------------------------
    ("green_z gamma 0", lambda: baselines._green_z(5, 10, 0.0), ValueError, ["gamma", "(0, 1)"]),
    ("green_z gamma 1.5", lambda: baselines._green_z(5, 10, 1.5), ValueError, ["gamma", "(0, 1)"]),
    ("green_z gamma nan", lambda: baselines._green_z(5, 10, float("nan")), ValueError, ["gamma", "(0, 1)"]),
    ("green_z green > scored", lambda: baselines._green_z(11, 10, 0.5), ValueError, ["n_green", "[0, 10]"]),
    ("green_z green < 0", lambda: baselines._green_z(-1, 10, 0.5), ValueError, ["n_green", "[0, 10]"]),
    ("green_z scored < 0", lambda: baselines._green_z(0, -1, 0.5), ValueError, ["n_scored", ">= 0"]),
    ("green_z scored float", lambda: baselines._green_z(3, 10.0, 0.5), TypeError, ["n_scored", "integer"]),
    ("tail_p_values green > scored", lambda: baselines.tail_p_values(30, 10), ValueError, ["n_green", "[0, 10]"]),
    ("tail_p_values gamma 1", lambda: baselines.tail_p_values(3, 10, 1.0), ValueError, ["gamma", "(0, 1)"]),
    # ---- embedding ---------------------------------------------------------
    ("config S=1", lambda: ChainMarkConfig(KEY, S=1), ValueError, ["S", ">= 2"]),
    ("config rho 1.5", lambda: ChainMarkConfig(KEY, rho=1.5), ValueError, ["rho", "[0, 1]"]),
    ("config rho -1", lambda: ChainMarkConfig(KEY, rho=-1), ValueError, ["rho", "[0, 1]"]),
    ("config gate", lambda: ChainMarkConfig(KEY, gate="median"), ValueError, ["gate", "high_entropy"]),
    ("config key int", lambda: ChainMarkConfig(12345), TypeError, ["key", "bytes"]),
    ("config key empty", lambda: ChainMarkConfig(b""), ValueError, ["key", "empty"]),
    ("config all with rho", lambda: ChainMarkConfig(KEY, gate="all", rho=0.5), ValueError, ["rho", "1"]),
    ("config soft_cycle S=2", lambda: ChainMarkConfig(KEY, S=2, topology="soft_cycle"), ValueError, ["S >= 3"]),
    ("config topology", lambda: ChainMarkConfig(KEY, topology="spiral"), ValueError, ["topology", "clockwork"]),
    ("config topology other S", lambda: ChainMarkConfig(KEY, S=5, topology=Topology.clockwork(4)), ValueError,
     ["S = 4", "S = 5"]),
    ("processor config", lambda: ChainMarkLogitsProcessor({"S": 5}), TypeError, ["config", "ChainMarkConfig"]),
    ("processor table for another vocabulary", _processor_call_with_wrong_width, ValueError,
     ["vocab_size", "100", "200"]),
    ("generate batch_size 0", lambda: generate(None, None, ["hi"],
                                               sampling=Sampling(batch_size=0)), ValueError, ["batch_size", ">= 1"]),
    ("generate max_new_tokens 0", lambda: generate(None, None, ["hi"],
                                                   sampling=Sampling(max_new_tokens=0)), ValueError,
     ["max_new_tokens", ">= 1"]),
    ("generate prompt str", lambda: generate(None, None, "one prompt"), TypeError, ["prompts"]),
    ("generate temperature 0", lambda: generate(None, None, ["hi"],
                                                sampling=Sampling(temperature=0.0)), ValueError,
     ["temperature", "> 0"]),
]


@pytest.mark.parametrize("label, call, exc, words", CASES,
                         ids=[c.values[0] if hasattr(c, "marks") else c[0] for c in CASES])
def test_bad_parameter_is_rejected_with_a_clear_message(label, call, exc, words):
    with pytest.raises(exc) as err:
        call()
    message = str(err.value)
    for word in words:
        assert word in message, f"{label}: {word!r} missing from {message!r}"


def test_python_int_list_across_2_to_the_63():
    """A list of valid ids on both sides of 2**63 is accepted (numpy alone would make it float64)."""
    ids = [2**64 - 1, 1, 2**63, 5]
    states = states_of(ids, KEY, 7)
    assert [int(st) for st in states] == [state_of(t, KEY, 7) for t in ids]
    assert detect(ids, ChainMarkConfig(KEY, S=7), test="z").n_scored == 3


def test_every_id_call_site_takes_tensors_and_numpy_scalars():
    """Lists, numpy arrays, lists of numpy or torch scalars and tensors give the same answer everywhere."""
    ids = [3, 17, 42, 5, 99, 0, 64, 8]
    forms = [ids, np.array(ids), list(np.array(ids)), [torch.tensor(t) for t in ids], torch.tensor(ids),
             tuple(np.array(ids, dtype=np.uint16))]
    kgw = baselines.KGWConfig(KEY)
    ref = (detect(ids, CONFIG, test="z").to_dict(), attacks.Substitution(0.5, 100).edit(ids), attacks.Deletion(0.5).edit(ids),
           adversary.keyed_scrub(ids, CONFIG, 100), baselines.kgw_detect(ids, kgw, 100).z,
           lr_detect(ids, CONFIG, [0.5] * 7).llr)
    for form in forms:
        got = (detect(form, CONFIG, test="z").to_dict(), attacks.Substitution(0.5, 100).edit(form),
               attacks.Deletion(0.5).edit(form),
               adversary.keyed_scrub(form, CONFIG, 100), baselines.kgw_detect(form, kgw, 100).z,
               lr_detect(form, CONFIG, [0.5] * 7).llr)
        assert got == ref, type(form)
        assert attacks.edit_fraction(form, ids) == 0.0
    assert detect_batch([forms[3], forms[4]], CONFIG, test="z")[1].to_dict() == ref[0]


def test_as_token_array_is_the_one_normaliser_for_texts_and_batches():
    """One text or (ndim=2) a rectangular batch, from any container; the dtype says what the ids need."""
    assert as_token_array([]).dtype == np.int64 and as_token_array(torch.tensor([], dtype=torch.long)).size == 0
    assert as_token_array(np.array([1, 2], dtype=np.uint16)).dtype == np.int64
    assert as_token_array(np.array([1, 2**64 - 1], dtype=np.uint64)).dtype == np.uint64
    assert as_token_array([torch.tensor(4), np.int32(5), 6]).tolist() == [4, 5, 6]
    matrix = as_token_array(torch.arange(6).reshape(2, 3), 6, ndim=2)
    assert matrix.dtype == np.int64 and matrix.tolist() == [[0, 1, 2], [3, 4, 5]]
    big = as_token_array([[1, 2**64 - 1], [2**63, 5]], ndim=2)
    assert big.dtype == np.uint64 and big.tolist() == [[1, 2**64 - 1], [2**63, 5]]
    assert as_token_array(np.zeros((0, 4), dtype=int), ndim=2).shape == (0, 4)
    for bad, exc, words in [
        (lambda: as_token_array(np.arange(3), ndim=2), ValueError, ["token_ids", "two-dimensional"]),
        (lambda: as_token_array([[1, 2], [3]], ndim=2), ValueError, ["token_ids", "rectangular"]),
        (lambda: as_token_array([[1, -2]], ndim=2), ValueError, ["token_ids", "non-negative"]),
        (lambda: as_token_array([[1, 9]], 9, ndim=2), ValueError, ["token_ids", "[0, 8]"]),
        (lambda: as_token_array([[1.5]], ndim=2), TypeError, ["token_ids", "integers"]),
        (lambda: as_token_array([1], ndim=3), ValueError, ["ndim"]),
    ]:
        with pytest.raises(exc) as err:
            bad()
        assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_on_the_gpu_are_read_back():
    ids = torch.tensor([3, 17, 42, 5, 99], device="cuda")
    assert detect(ids, CONFIG, test="z").to_dict() == detect(ids.tolist(), CONFIG, test="z").to_dict()
    assert attacks.Deletion(0.4).edit(ids) == attacks.Deletion(0.4).edit(ids.tolist())
    assert [r.z for r in detect_batch(ids[None, :], CONFIG, test="z")] == [detect(ids, CONFIG, test="z").z]


# ---- calibration (chainmark.calibrate) --------------------------------------
def _calibrate_cases():
    from chainmark import calibrate as cal

    z = np.random.default_rng(0).normal(size=500)
    return cal, z


CALIBRATE_CASES = [
    ("z_alpha 0", lambda cal, z: cal.z_alpha(0.0), ValueError, ["alpha", "(0, 1)"]),
    ("z_alpha 1", lambda cal, z: cal.z_alpha(1.0), ValueError, ["alpha", "(0, 1)"]),
    ("s_star n=1", lambda cal, z: cal.s_star(1, 0.5, 0.01), ValueError, ["n", "2"]),
    ("s_star rho 0", lambda cal, z: cal.s_star(100, 0.0, 0.01), ValueError, ["rho"]),
    ("s_star rho 1.5", lambda cal, z: cal.s_star(100, 1.5, 0.01), ValueError, ["rho"]),
    ("s_star alpha 1", lambda cal, z: cal.s_star(100, 0.5, 1.0), ValueError, ["alpha", "(0, 1)"]),
    ("s_star k 0", lambda cal, z: cal.s_star(100, 0.5, 0.01, k=0), ValueError, ["k"]),
    ("predicted_z S 1", lambda cal, z: cal.predicted_z(100, 0.5, 1), ValueError, ["S", ">= 2"]),
    ("predicted_z k >= S", lambda cal, z: cal.predicted_z(100, 0.5, 3, k=3), ValueError, ["k"]),
    ("predicted_z n 1", lambda cal, z: cal.predicted_z(1, 0.5, 5), ValueError, ["n", "2"]),
    ("predicted_z rho 2", lambda cal, z: cal.predicted_z(100, 2.0, 5), ValueError, ["rho"]),
    ("midpoint rho -1", lambda cal, z: cal.midpoint_threshold(-1.0, 5), ValueError, ["rho"]),
    ("midpoint S 1", lambda cal, z: cal.midpoint_threshold(0.5, 1), ValueError, ["S", ">= 2"]),
    ("hoeffding n 1", lambda cal, z: cal.hoeffding_fpr_bound(1, 0.5, 5), ValueError, ["n", "2"]),
    ("hoeffding k >= S", lambda cal, z: cal.hoeffding_fpr_bound(100, 0.5, 4, k=4), ValueError, ["k"]),
    ("recalibrate method", lambda cal, z: cal.recalibrate(z, 0.01, method="median"), ValueError,
     ["method", "sd", "quantile"]),
    ("recalibrate alpha", lambda cal, z: cal.recalibrate(z, 1.5), ValueError, ["alpha", "(0, 1)"]),
    ("recalibrate empty", lambda cal, z: cal.recalibrate([], 0.01), ValueError, ["null_z"]),
    ("recalibrate one value", lambda cal, z: cal.recalibrate([1.0], 0.01), ValueError, ["null_z"]),
    ("recalibrate nan", lambda cal, z: cal.recalibrate([1.0, float("nan"), 0.5], 0.01), ValueError,
     ["null_z", "finite"]),
    ("lifted empty", lambda cal, z: lifted_threshold([], 0.5), ValueError, ["null_z"]),
    ("lifted margin nan", lambda cal, z: lifted_threshold(z, float("nan")), ValueError, ["margin"]),
]


@pytest.mark.parametrize("label, call, exc, words", CALIBRATE_CASES, ids=[c[0] for c in CALIBRATE_CASES])
def test_calibration_rejects_bad_parameters(label, call, exc, words):
    cal, z = _calibrate_cases()
    with pytest.raises(exc) as err:
        call(cal, z)
    message = str(err.value)
    for word in words:
        assert word in message, f"{label}: {word!r} missing from {message!r}"


def test_valid_edge_values_are_accepted():
    """The allowed ranges are inclusive where they say so."""
    assert check_rho(0) == 0.0 and check_rho(1) == 1.0
    assert check_alpha(1e-300) == 1e-300
    assert Topology.from_matrix(np.ones((3, 3)) - np.eye(3)).k == 2  # k = S - 1
    assert ChainMarkConfig(KEY, S=2, rho=0.0).S == 2
    res = detect([], ChainMarkConfig(KEY, S=64), test="z")
    assert res.n_tokens == 0 and res.p_value == 1.0
    assert math.isfinite(detect([0, 1], ChainMarkConfig(KEY, S=2), test="z").z)
    # no transitions: z = 0 as detect reports for fewer than two tokens; phi's ends are allowed
    assert z_score(0.7, 0.2, 0) == 0.0 == detect([3], CONFIG, test="z").z
    assert z_score(0.0, 0.2, 10) < 0 < z_score(1.0, 0.2, np.int64(10))
    assert p_value(math.inf) == 0.0 and p_value(-math.inf) == 1.0 and log_p_value(np.float64(0.0)) < 0
    assert attacks.n_edits(0.5, 0) == 0 and attacks.n_edits(0.5, np.int64(3)) == 2
    assert len(adversary.random_walk_text(1, CONFIG, 100)) == 1
    assert adversary.keyed_scrub([0, 99, 5], CONFIG, 100) is not None  # the last id of the vocabulary is fine
    assert baselines._green_z(0, 0, 0.5) == 0.0
    assert baselines._green_z(10, 10, 0.5) == pytest.approx(math.sqrt(10))
    assert baselines.tail_p_values(10, 10)["binomial"] == pytest.approx(0.5 ** 10)
