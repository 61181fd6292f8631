"""How ``cmlab reference verify`` compares a regenerated batch with the stored one: a rule per field.

What follows from the token ids and the key (ids, gate decisions, counts, verdicts, phi, z, p-values) is
compared exactly; only floats PyTorch computes from the model's logits get a tolerance, stated per field
(:data:`_VERIFY_FIELDS`, recorded in a run's manifest); a float without a rule is compared exactly. A text
whose tokens diverge is reported once, at the first token where they part.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


#: The three ways ``verify`` compares a float (``"rule"`` of an entry of :data:`_VERIFY_FIELDS`):
#:
#: * ``exact``: the regenerated value must equal the stored one (``==``: the same double);
#: * ``rel``: ``math.isclose(stored, fresh, rel_tol=rel, abs_tol=abs)``, for floats PyTorch computes from
#:   the model's logits: its CPU kernels (Intel or AMD, AVX2 or AVX-512) sum in different orders, so these
#:   move in the last bits (the numbers are in :data:`_VERIFY_FIELDS`);
#: * ``log10_p``: a p-value computed from the model's logits, compared on a log scale,
#:   ``|log10 stored - log10 fresh| <= log10``, a relative tolerance that means the same at 1e-12 as at
#:   0.3 (an absolute one would call 1e-12 and 4e-4 equal); a p at or below the smallest normal double
#:   (:data:`_P_FLOOR`, 0 included) counts as that double, so an underflow on one side only is no
#:   difference while 0 against 1e-300 is one.
_VERIFY_RULES = ("exact", "rel", "log10_p")
#: Where a ``log10_p`` comparison floors p: the smallest normal double (below it p has lost precision).
_P_FLOOR = 2.2250738585072014e-308

#: How ``verify`` compares each float field a record stores, by the field's name: the last key of its
#: path, list indices dropped (``gate_signal[7]`` is ``gate_signal``). A dotted name
#: (``detection.<detector>.p_value``) names the field under one parent and wins over the bare name. A
#: float field not listed here is compared EXACTLY, so a field added to the records later cannot slip
#: through a tolerance meant for another; ids, flags, counts, verdicts and strings are always exact.
#:
#: Why each field is in its class (the record writers: :func:`cmlab.harness.runner.run_batch`,
#: :mod:`cmlab.harness.adapters`, :mod:`chainmark.detection`, :mod:`cmlab.comparison.baselines`):
#:
#: * exact: pure functions of the token ids, the public key and integer counts, in Python and SciPy
#:   scalar arithmetic (no torch, no vectorised reduction), hence the same double on every CPU. The
#:   ChainMark and KGW detectors read only ids and key. SWEET's detector does run the model, but its
#:   entropies only choose which positions are scored: they reach the record as the counts
#:   ``n_scored`` and ``n_green``, compared exactly, and its phi, z and p follow from those counts.
#:   A paraphrase's scores follow from its stored text, compared exactly. So no stored p-value depends
#:   on the kernels, and no field of the protocol has the ``log10_p`` rule today; a detector whose score
#:   itself comes from the logits (the likelihood-ratio detector, :mod:`cmlab.comparison.lrdetect`) would add
#:   ``"detection.<its name>.z"`` as ``rel`` and ``"detection.<its name>.p_value"`` as ``log10_p``.
#: * rel (kernel floats): the two floats the record takes from the model's logits.
_VERIFY_FIELDS: dict[str, dict[str, Any]] = {
    # exact ------------------------------------------------------------------------------------------
    "phi": {"rule": "exact"},               # legal transitions (ChainMark) or green tokens (KGW, SWEET) / scored
    "z": {"rule": "exact"},                 # detect.z_score / baselines.green_z of those counts
    "p_value": {"rule": "exact"},           # scipy.special.ndtr(-z) of that z (every detector of the protocol)
    "p_value_binomial": {"rule": "exact"},  # scipy binom.sf of the green and scored counts (KGW, SWEET)
    "edit_fraction": {"rule": "exact"},     # Levenshtein distance of two id lists / the original length
    "rho_realised": {"rule": "exact"},      # the mean of the stored 0/1 gate flags: a count over a count
    # kernel floats (measured: three committed batches regenerated on an AMD EPYC against the Intel Xeon
    # that made the run, with its AVX-512 and its AVX2 kernels) -----------------------------------------
    # next-token entropy at generation, stored rounded to 4 decimals: a drift in the last bits moves it
    # by a whole rounding step of 1e-4 (seen: 2-3% of the values, never more than one step), so abs
    # allows up to two steps, no more; rel is the kernels' drift of the entropy itself, never binding
    # below 25 nats
    "gate_signal": {"rule": "rel", "rel": 1e-5, "abs": 2.5e-4},
    # exp(mean NLL) by teacher forcing, stored in full: relative only (seen: 1.3e-6 relative with the
    # AVX-512 kernels, 1.07e-5 with AVX2; 1e-4 leaves a tenfold margin)
    "self_ppl": {"rule": "rel", "rel": 1e-4, "abs": 0.0},
}
#: The tolerance of the ``log10_p`` rule where an entry gives none: p within a factor 10**0.001 (0.23%).
_LOG10_P_TOLERANCE = 1e-3

#: What a new run records in its manifest (``verify_tolerance``, format 2): the rules of
#: :data:`_VERIFY_FIELDS`, and that a float field they do not list is compared exactly. Runs made before
#: it record format 1, ``{"rel": 1e-5, "abs": 5e-4}``, one tolerance for every float; see
#: :func:`tolerance_rules` for how either is read.
_VERIFY_FORMAT = "chainmark-verify/2"
VERIFY_TOLERANCE: dict[str, Any] = {"format": _VERIFY_FORMAT, "default": "exact", "fields": _VERIFY_FIELDS}
_FORMAT1 = {"rel": 1e-5, "abs": 5e-4}   # what format 1 meant where a key was missing


def _check_rule(name: str, rule: Any) -> dict[str, Any]:
    """One field's rule, checked (a tolerance is a finite number >= 0); a clean copy."""
    if not isinstance(rule, Mapping) or rule.get("rule") not in _VERIFY_RULES:
        raise ValueError(f"verify rule of field {name!r} must be a mapping with 'rule' in {_VERIFY_RULES}, "
                         f"got {rule!r}")
    numbers = {"exact": (), "rel": ("rel", "abs"), "log10_p": ("log10",)}[rule["rule"]]
    out: dict[str, Any] = {"rule": rule["rule"]}
    for k in numbers:
        v = rule.get(k, _LOG10_P_TOLERANCE if k == "log10" else 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"verify rule of field {name!r}: {k} must be a finite number >= 0, got {v!r}")
        out[k] = float(v)
    return out


def tolerance_rules(recorded: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The per-field rules ``verify`` applies to a run whose manifest records ``recorded`` (``verify_tolerance``).

    The classes come from the code (:data:`_VERIFY_FIELDS`): which fields are exact follows from how they
    are computed, and no manifest relaxes one. A manifest states the numbers of the other rules:

    * format 2 (:data:`VERIFY_TOLERANCE`, what a run writes now): a listed field that the code compares
      with the same rule takes the manifest's numbers; anything else the manifest lists is left as the
      code has it (exact, for a field the code does not know);
    * format 1 (``{"rel": ..., "abs": ...}``, the runs before it, the committed reference among them):
      one tolerance for every float, read as the tolerance of the kernel floats (rule ``rel``); every
      other float is exact and ``log10_p`` keeps the code's numbers;
    * None (no entry): the code's rules.
    """
    rules = {name: _check_rule(name, rule) for name, rule in _VERIFY_FIELDS.items()}
    if recorded is None:
        return rules
    if not isinstance(recorded, Mapping):
        raise ValueError(f"verify_tolerance must be a mapping, got {recorded!r}")
    if "format" not in recorded and set(recorded) <= {"rel", "abs"}:   # format 1
        old = _check_rule("(format 1)", {"rule": "rel", **_FORMAT1, **recorded})
        return {name: dict(old) if rule["rule"] == "rel" else rule for name, rule in rules.items()}
    if recorded.get("format") != _VERIFY_FORMAT or not isinstance(recorded.get("fields"), Mapping):
        raise ValueError(f"unknown verify_tolerance {dict(recorded)!r}: expected format {_VERIFY_FORMAT!r} "
                         f"with 'fields', or the older {{'rel': ..., 'abs': ...}}")
    if recorded.get("default", "exact") != "exact":
        raise ValueError(f"verify_tolerance: a field without a rule is compared exactly, not "
                         f"{recorded['default']!r}")
    for name, rule in recorded["fields"].items():
        stated = _check_rule(name, rule)
        if name in rules and rules[name]["rule"] == stated["rule"] != "exact":
            rules[name] = stated
    return rules


def _is_float(x: Any) -> bool:
    return isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool))


def _rule_of(keys: Sequence[str], rules: Mapping[str, Mapping[str, Any]]) -> tuple[str, Mapping[str, Any] | None]:
    """The rule of the field at ``keys`` (its path's dict keys): the longest dotted tail that ``rules``
    names, else None (compared exactly)."""
    for i in range(len(keys)):
        name = ".".join(keys[i:])
        if name in rules:
            return name, rules[name]
    return (keys[-1] if keys else ""), None


def _float_difference(stored: float, fresh: float, name: str, rule: Mapping[str, Any] | None) -> str | None:
    """Why ``fresh`` does not match ``stored`` under ``rule`` (None when it does)."""
    kind = "exact" if rule is None else rule["rule"]
    if kind == "rel":
        if math.isclose(stored, fresh, rel_tol=rule["rel"], abs_tol=rule["abs"]):
            return None
        return f"{name}: beyond the tolerance rel {rule['rel']:g}, abs {rule['abs']:g}"
    if kind == "log10_p":
        if not (0.0 <= stored <= 1.0 and 0.0 <= fresh <= 1.0):
            return f"{name}: not a probability"
        gap = abs(math.log10(max(stored, _P_FLOOR)) - math.log10(max(fresh, _P_FLOOR)))
        if gap <= rule["log10"]:
            return None
        return f"{name}: log10 p differs by {gap:.3g}, beyond the tolerance {rule['log10']:g}"
    if stored == fresh:
        return None
    why = "it follows from the token ids, the key and the counts" if rule is not None else "no rule in VERIFY_FIELDS"
    return f"{name}: compared exactly, {why}; differs by {fresh - stored:.3g}"


def _compare(stored: Any, fresh: Any, where: str, out: list[str],
             rules: Mapping[str, Mapping[str, Any]], keys: tuple[str, ...] = ()) -> None:
    """Append to ``out`` every place where ``fresh`` differs from ``stored``: exactly for ids, flags,
    counts and strings, by the field's rule in ``rules`` for floats (exactly for a field without one)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for k in sorted(set(stored) | set(fresh)):
            if k == "seconds":   # wall-clock times
                continue
            _compare(stored.get(k), fresh.get(k), f"{where}.{k}", out, rules, (*keys, str(k)))
    elif isinstance(stored, list) and isinstance(fresh, list) and len(stored) == len(fresh):
        for i, (a, b) in enumerate(zip(stored, fresh)):
            _compare(a, b, f"{where}[{i}]", out, rules, keys)
            if len(out) > 20:
                return
    elif (isinstance(stored, float) or isinstance(fresh, float)) and _is_float(stored) and _is_float(fresh):
        name, rule = _rule_of(keys, rules)
        why = _float_difference(stored, fresh, name, rule)
        if why is not None:
            out.append(f"{where}: stored {stored!r}, regenerated {fresh!r} ({why})")
    elif stored != fresh or type(stored) is not type(fresh):
        out.append(f"{where}: stored {str(stored)[:80]!r}, regenerated {str(fresh)[:80]!r}")


def _divergence(stored: Mapping[str, Any], fresh: Mapping[str, Any], tau: float | None) -> str | None:
    """Where a regenerated text's tokens first leave the stored ones, with the gate's margin there.

    None when the token ids agree. The margin is the stored gate signal minus
    the threshold tau at that position: a margin near zero means the gate
    decision sat on a rounding boundary of this CPU's arithmetic.
    """
    a, b = list(stored.get("token_ids") or []), list(fresh.get("token_ids") or [])
    if a == b:
        return None
    pos = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    where = (f"tokens diverge at position {pos} of {len(a)} (stored id {a[pos] if pos < len(a) else None}, "
             f"regenerated {b[pos] if pos < len(b) else None})")
    signals, fresh_signals = stored.get("gate_signal") or [], fresh.get("gate_signal") or []
    gated, fresh_gated = stored.get("gated") or [], fresh.get("gated") or []
    if pos < len(signals) and signals[pos] is not None:
        where += f"; gate signal there {signals[pos]:.4f} stored"
        if pos < len(fresh_signals) and fresh_signals[pos] is not None:
            where += f", {fresh_signals[pos]:.4f} regenerated"
        if tau is not None and math.isfinite(tau):
            where += f" (tau {tau:.4f}, margin {signals[pos] - tau:+.4f})"
    if pos < len(gated) and pos < len(fresh_gated):
        where += f"; gated {bool(gated[pos])} stored, {bool(fresh_gated[pos])} regenerated"
    return where


def compare_records(stored: Sequence[Mapping[str, Any]], fresh: Sequence[Mapping[str, Any]],
                    tau: float | None = None, rules: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """The differences between a stored batch and its regeneration (empty when they match).

    Floats are compared by ``rules``, field name to rule (default :data:`_VERIFY_FIELDS`; ``verify``
    passes :func:`tolerance_rules` of the run's manifest); a float field without a rule exactly. A
    text whose tokens diverge is reported once, where they part, and its other fields (which
    follow from the tokens) are not compared.
    """
    rules = tolerance_rules() if rules is None else {n: _check_rule(n, r) for n, r in rules.items()}
    if len(stored) != len(fresh):
        return [f"stored {len(stored)} records, regenerated {len(fresh)}"]
    out: list[str] = []
    for i, (a, b) in enumerate(zip(stored, fresh)):
        split = _divergence(a, b, tau)
        if split is not None:
            out.append(f"[{i}] {a.get('id', '')}: {split}")
        else:
            _compare(a, b, f"[{i}]", out, rules)
        if len(out) > 20:
            break
    return out


__all__ = ["VERIFY_TOLERANCE", "compare_records", "tolerance_rules"]
