"""Side by side on the reference run: the package's anytime e-process and the peer (Su, Wang & Zhao's average).

    python tools/measure_anytime_peer.py [--alpha 0.01] [--json FILE]

For the 400 ChainMark replies of the head-to-head and the 1,200 unwatermarked
ones (the head-to-head's plus the null experiment's), under the reference
key with S = 5, rho = 0.5 and the high-entropy gate, it computes each text's
scored legal indicators (transitions into a token not seen before), runs
:func:`chainmark.auditor.anytime.bet_grid`'s e-process and
:func:`cmlab.comparison.anytime_peer.peer_log_e` on the same sequence and
prints, for each, the tokens read to detection (median, 90th percentile, an
undetected text counted as never), the share detected within the text, and
the share of unwatermarked replies flagged. Model-free; reads the stored
records only.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chainmark.auditor.anytime import anytime_detect, bet_grid  # noqa: E402
from chainmark.auditor.rates import clopper_pearson_lower, clopper_pearson_upper  # noqa: E402
from cmlab.comparison.anytime_peer import peer_crossing  # noqa: E402
from chainmark.config import ChainMarkConfig  # noqa: E402
from chainmark.detection import valid_transitions  # noqa: E402
from cmlab.harness.reference import load_texts, reference_key  # noqa: E402
from chainmark.partition import states_of  # noqa: E402

DETECTORS = ("chainmark", "peer", "peer_weight_adaptive", "peer_grenander")


def scored_indicators(ids: np.ndarray, config: ChainMarkConfig) -> tuple[np.ndarray, np.ndarray]:
    """The legal indicators of the scored transitions and the index of the token each one reaches."""
    states = states_of(ids, config.key, config.S)
    legal = valid_transitions(states, config.topo)
    _, first = np.unique(ids, return_index=True)
    fresh = np.zeros(ids.size, dtype=bool)
    fresh[first] = True
    at = np.flatnonzero(fresh[1:]) + 1  # tokens 1.. that occur for the first time
    return legal[at - 1], at


def crossings(x: np.ndarray, at: np.ndarray, p0: float, alpha: float, grid: Any) -> dict[str, int | None]:
    """For each detector, the index of the token whose transition first took E to 1/alpha (None if none)."""
    out: dict[str, int | None] = {}
    bound = math.log(1.0 / alpha)
    if x.size:
        log_e = grid.log_e(np.cumsum(x), np.arange(1, x.size + 1))
        over = np.flatnonzero(log_e >= bound)
        out["chainmark"] = int(at[over[0]]) if over.size else None
    else:
        out["chainmark"] = None
    for name, component in (("peer", "average"), ("peer_weight_adaptive", "weight_adaptive"),
                            ("peer_grenander", "grenander")):
        j = peer_crossing(x, p0, alpha, component)
        out[name] = int(at[j]) if j >= 0 else None
    return out


def summary(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Tokens read to detection (crossing token + 1; an undetected text counts as never) and scored transitions
    to detection, over the texts; the share detected with its 95% Clopper-Pearson bounds."""
    tokens = np.array([math.inf if r[name] is None else r[name] + 1 for r in rows])
    scored = np.array([math.inf if r[name] is None else int(np.searchsorted(r["at"], r[name])) + 1
                       for r in rows])
    hits = int(np.isfinite(tokens).sum())

    def q(values: np.ndarray, level: float) -> float:
        return float(np.quantile(values, level, method="inverted_cdf"))

    return {"n": len(rows), "detected": hits, "share_detected": hits / len(rows),
            "share_low": clopper_pearson_lower(hits, len(rows)), "share_high": clopper_pearson_upper(hits, len(rows)),
            "median_tokens": q(tokens, 0.5), "p90_tokens": q(tokens, 0.9),
            "median_scored": q(scored, 0.5), "p90_scored": q(scored, 0.9)}


def measure(alpha: float) -> dict[str, Any]:
    """Every text's crossings, and the summaries by group and detector."""
    config = ChainMarkConfig(reference_key(), S=5, rho=0.5, gate="high_entropy")
    p0 = float(config.topo.p0)
    grid = bet_grid(p0, config.rho)
    head = load_texts("head_to_head")
    groups = {"chainmark": [r for r in head if r["cell"] == "chainmark"],
              "unwatermarked": [r for r in head + load_texts("null") if not r["watermarked"]]}
    result: dict[str, Any] = {"alpha": alpha, "p0": p0, "S": config.S, "rho": config.rho, "groups": {}}
    for group, records in groups.items():
        rows = []
        for r in records:
            ids = np.asarray(r["token_ids"], dtype=np.int64)
            x, at = scored_indicators(ids, config)
            row = {"id": r["id"], "cell": r["cell"], "n_tokens": int(ids.size), "n_scored": int(x.size),
                   "n_legal": int(x.sum()), "at": at, **crossings(x, at, p0, alpha, grid)}
            check = anytime_detect(ids, config, alpha=alpha).crossing_token
            if check != row["chainmark"]:
                raise AssertionError(f"{r['id']}: anytime_detect crosses at {check}, this script at {row['chainmark']}")
            rows.append(row)
        earlier = sum(1 for r in rows if _key(r["peer"]) < _key(r["chainmark"]))
        later = sum(1 for r in rows if _key(r["peer"]) > _key(r["chainmark"]))
        result["groups"][group] = {
            "n_texts": len(rows), "median_n_tokens": float(np.median([r["n_tokens"] for r in rows])),
            "median_n_scored": float(np.median([r["n_scored"] for r in rows])),
            "legal_rate": sum(r["n_legal"] for r in rows) / max(1, sum(r["n_scored"] for r in rows)),
            "detectors": {name: summary(rows, name) for name in DETECTORS},
            "peer_vs_chainmark": {"peer_earlier": earlier, "same_token": len(rows) - earlier - later,
                                  "peer_later": later}}
    return result


def _key(token: int | None) -> float:
    return math.inf if token is None else float(token)


def _print(result: dict[str, Any]) -> None:
    print(f"reference run, S = {result['S']}, rho = {result['rho']}, p0 = {result['p0']}, alpha = {result['alpha']}")
    for group, g in result["groups"].items():
        print(f"\n{group}: {g['n_texts']} replies, median {g['median_n_tokens']:.0f} tokens, "
              f"{g['median_n_scored']:.0f} scored, legal rate {g['legal_rate']:.3f}")
        print(f"  {'detector':<22}{'detected':>22}{'median tok':>12}{'p90 tok':>10}{'median sc':>11}{'p90 sc':>9}")
        for name, s in g["detectors"].items():
            share = f"{s['detected']}/{s['n']} {100 * s['share_detected']:.1f}% " \
                    f"[{100 * s['share_low']:.1f}, {100 * s['share_high']:.1f}]"
            print(f"  {name:<22}{share:>22}{s['median_tokens']:>12}{s['p90_tokens']:>10}"
                  f"{s['median_scored']:>11}{s['p90_scored']:>9}")
        pv = g["peer_vs_chainmark"]
        print(f"  peer (average) vs chainmark, per reply: earlier {pv['peer_earlier']}, same token "
              f"{pv['same_token']}, later {pv['peer_later']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alpha", type=float, default=0.01, help="flag when E reaches 1/alpha (default 0.01)")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    result = measure(args.alpha)
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=float) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
