"""Measure the stealing adversary on the committed reference run: its curves, the key-set defence, the generator.

    python tools/measure_stealing.py curve      # the curves against tokens observed (no model; minutes)
    python tools/measure_stealing.py keyset     # keys per account: attribution and the power it costs (no model)
    python tools/measure_stealing.py generate   # the generator forger on the embedded model (about 20 min, 2 cores)
    python tools/measure_stealing.py modelcheck # the model-checked verification of real and forged replies (minutes)
    python tools/measure_stealing.py orders     # the curve's spread over five collection orders (no model; a minute)
    python tools/measure_stealing.py adaptive   # the generator with a map from the whole pool, model-checked (10 min)
    python tools/measure_stealing.py context    # the context-keyed variant: null, power, robustness, quality, stealing
    python tools/measure_stealing.py context-generate  # the generator forger against the variant (about 15 min)

Every part writes into ``book/cmlab/data/stealing/`` and resumes: ``curve`` rewrites ``curve.json`` after each
point and skips the points it holds for the same pool; ``generate`` writes each batch of forged replies whole
(``generated/t<tokens>_b<batch>.jsonl.gz``) and skips the batches on disk. What the page shows is read from these
files by :mod:`cmlab.harness.stealing` (``load_curve``, ``load_keyset``, ``load_generated``, ``load_modelcheck``).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from typing import Any

import numpy as np

from chainmark.jsonio import atomic_write
from cmlab.harness.stealing import (ADAPTIVE_FILE, CURVE_FILE, GENERATED_DIR, GENERATOR_TOKENS, KEYSET_FILE,
                                    MODELCHECK_FILE, ORDERS_FILE,
                                    TOKENS_OBSERVED,
                                    attacker_pool, blind_scrub, first_tokens, generator_batches, reference_config,
                                    reference_gate, stealing_point)


def _write(path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def curve(args: argparse.Namespace) -> None:
    pool = attacker_pool()
    held = {"unwatermarked": len(pool.held_out_unwatermarked), "watermarked": len(pool.held_out_watermarked)}
    data = json.loads(CURVE_FILE.read_text("utf-8")) if CURVE_FILE.exists() else {}
    if data.get("pool_tokens") != pool.pool_tokens or data.get("held_out") != held:
        data = {"pool_tokens": pool.pool_tokens, "pool_texts": len(pool.watermarked),
                "baseline_texts": len(pool.baseline), "held_out": held, "points": {}}
    if "blind_scrub" not in data:
        data["blind_scrub"] = blind_scrub(pool)
        _write(CURVE_FILE, data)
    sizes = [t for t in TOKENS_OBSERVED if t <= pool.pool_tokens] + [None]
    for tokens in sizes:
        name = "true_key" if tokens is None else str(tokens)
        if name in data["points"]:
            continue
        t0 = time.perf_counter()
        row = stealing_point(pool, tokens)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        data["points"][name] = row
        _write(CURVE_FILE, data)
        right = row["states_right"]["500"]
        print(f"{name}: known {row['known']}, top-500 right {right['right']}/{right['total']}, forged "
              f"(exact, 10%) {row['forge']['exact']['0.1']['rate']:.3f}, ({row['seconds']} s)", flush=True)


def keyset(args: argparse.Namespace) -> None:
    """Keys per account: forgeries built from account A's outputs, detected over A and K - 1 other accounts'
    keys; and the power detection over K keys keeps on the reference run's watermarked replies."""
    from chainmark.auditor.keysets import detect_over_keys
    from chainmark.config import ChainMarkConfig
    from chainmark.detection import detect
    from chainmark.keys import hkdf
    from cmlab.comparison.stealing import apply_path, forge_path, steal
    from cmlab.harness.reference.read import load_texts

    config, pool = reference_config(), attacker_pool()
    others = [ChainMarkConfig(hkdf(f"chainmark stealing account {i}".encode(), b"chainmark/v1/accounts"),
                              S=config.S, rho=config.rho) for i in range(args.accounts - 1)]
    accounts = [config] + others
    stolen = steal(first_tokens(pool.watermarked, args.tokens), pool.baseline, config.S, config.rho, pool.vocab_size)
    rows = []
    for ids in pool.held_out_unwatermarked:
        forged = apply_path(ids, forge_path(ids, stolen), budget=args.budget)
        v = detect_over_keys(forged, accounts)   # no vocab_size: each key hashes only the text's own ids
        rows.append({"flagged": v.is_watermarked, "attributed_to_stolen": 0 in v.flagged,
                     "attributed_to_other": any(i != 0 for i in v.flagged),
                     "best_is_other": v.is_watermarked and v.best != 0})
    marked = [r["token_ids"] for r in load_texts("head_to_head") if r["method"] == "chainmark"]
    p = np.array([detect(ids, config, test="exact", vocab_size=pool.vocab_size).p_value for ids in marked])
    power = {str(K): {"hits": int((p < 0.01 / K).sum()), "trials": int(p.size)} for K in (1, 10, 100, 1000, 10_000)}
    _write(KEYSET_FILE, {"accounts": args.accounts, "tokens_observed": args.tokens, "budget": args.budget,
                         "forged": len(rows), "flagged": sum(r["flagged"] for r in rows),
                         "attributed_to_stolen": sum(r["attributed_to_stolen"] for r in rows),
                         "attributed_to_other": sum(r["attributed_to_other"] for r in rows),
                         "best_is_other": sum(r["best_is_other"] for r in rows),
                         "power_at_alpha_over_K": power, "alpha": 0.01,
                         # scrubbing gets cheaper when each key is tested at alpha / K: the blind scrubber's price
                         "blind_scrub_over_keys": blind_scrub(pool, alpha=0.01 / args.accounts)["exact"]})
    print(json.loads(KEYSET_FILE.read_text("utf-8")))


def generate(args: argparse.Namespace) -> None:
    """The generator forger: the open model generating with the stolen map at the published gate's threshold."""
    import torch

    from chainmark.detection import detect
    from chainmark.embed import Sampling, generate as cm_generate, logits_width
    from cmlab.comparison.quality import self_perplexity
    from cmlab.comparison.stealing import StolenMapProcessor, steal
    from cmlab.harness.models import load_model
    from cmlab.harness.reference.protocol import PROTOCOL

    config, pool = reference_config(), attacker_pool()
    tau = reference_gate().tau
    model, tokenizer = load_model()
    vocab = logits_width(model)
    for tokens, texts in GENERATOR_TOKENS:
        stolen = steal(first_tokens(pool.watermarked, tokens), pool.baseline, config.S, config.rho, pool.vocab_size)
        for batch in generator_batches(texts):
            path = GENERATED_DIR / f"t{tokens}_b{batch.index:03d}.jsonl.gz"
            if path.exists():
                continue
            t0 = time.perf_counter()
            proc = StolenMapProcessor(stolen, tau, vocab)
            with torch.no_grad():
                gens = cm_generate(model, tokenizer, [q for _, _, q in batch.items], extra_processors=[proc],
                                   sampling=Sampling(max_new_tokens=PROTOCOL.max_new_tokens,
                                                     min_new_tokens=PROTOCOL.max_new_tokens,
                                                     temperature=PROTOCOL.temperature, seed=batch.seed,
                                                     batch_size=len(batch.items)))
                ppl = self_perplexity(model, gens)
            lines = []
            for (domain, index, _), g, q in zip(batch.items, gens, ppl):
                verdicts = {t: detect(g.token_ids, config, vocab_size=vocab, test=t) for t in ("exact", "z")}
                lines.append({"tokens_observed": tokens, "known": stolen.n_known(), "domain": domain,
                              "prompt_index": index, "seed": batch.seed, "prompt_ids": list(g.prompt_ids),
                              "token_ids": g.token_ids,
                              "self_ppl": float(q), **{f"{t}_p": v.p_value for t, v in verdicts.items()},
                              **{f"{t}_flagged": bool(v.is_watermarked) for t, v in verdicts.items()}})
            lines[0]["forced_steps"], lines[0]["steps"] = proc.forced, proc.steps
            GENERATED_DIR.mkdir(parents=True, exist_ok=True)
            atomic_write(path, gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode("utf-8"), mtime=0))
            flagged = sum(x["exact_flagged"] for x in lines)
            print(f"t{tokens} b{batch.index:03d}: {flagged}/{len(lines)} flagged (exact), "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)


def modelcheck(args: argparse.Namespace) -> None:
    """The model-checked verification (:func:`cmlab.comparison.model_check.model_check`) of the reference run's
    real watermarked replies, the generator's forgeries, the editor's forgeries that the detector flags, and
    unwatermarked replies: the share of each group verified."""
    import torch

    from chainmark.detection import detect
    from cmlab.comparison.model_check import model_check
    from cmlab.comparison.stealing import apply_path, forge_path, steal
    from cmlab.harness.models import load_model
    from cmlab.harness.reference.read import load_texts
    from cmlab.harness.stealing import HELD_OUT_PROMPTS, load_generated

    config, pool, gate = reference_config(), attacker_pool(), reference_gate()
    model, _ = load_model()
    h2h = load_texts("head_to_head")
    plain = [r for r in h2h if r["method"] == "none"] + load_texts("null")
    held = [r for r in plain if r["prompt_index"] >= HELD_OUT_PROMPTS]
    stolen = steal(first_tokens(pool.watermarked, 5_000), pool.baseline, config.S, config.rho, pool.vocab_size)
    edited = []
    for r in held:
        ids = apply_path(r["token_ids"], forge_path(r["token_ids"], stolen), budget=0.1)
        if detect(ids, config, test="exact", vocab_size=pool.vocab_size).is_watermarked:
            edited.append((r["prompt_ids"], ids))
    groups = {"real watermark": [(r["prompt_ids"], r["token_ids"]) for r in h2h if r["method"] == "chainmark"],
              "editor's forgeries flagged by the detector (map from 5,000 tokens, 10% edited)": edited,
              "unwatermarked replies": [(r["prompt_ids"], r["token_ids"]) for r in held]}
    for record in load_generated():
        if record["exact_flagged"]:
            name = (f"generator's forgeries flagged by the detector (map from {record['tokens_observed']:,} "
                    "tokens)")
            groups.setdefault(name, []).append((record["prompt_ids"], record["token_ids"]))
    out = {"verified_share": None, "groups": {}}
    with torch.no_grad():
        for name, items in groups.items():
            checks = [model_check(model, p, t, config, gate) for p, t in items]
            shares = [c.share for c in checks if c.gated]
            out["groups"][name] = {"texts": len(checks), "verified": sum(c.verified for c in checks),
                                   "median_share": float(np.median(shares)) if shares else None,
                                   "gated_steps": sum(c.gated for c in checks)}
            print(name, out["groups"][name], flush=True)
    from cmlab.comparison.model_check import VERIFIED_SHARE

    out["verified_share"] = VERIFIED_SHARE
    _write(MODELCHECK_FILE, out)


def orders(args: argparse.Namespace) -> None:
    """The curve's points re-measured under other collection orders (the pool shuffled with other seeds): how far
    a point moves when the adversary happens to collect other replies first. Forgery at 10% edits only."""
    config = reference_config()
    out: dict[str, Any] = {"orders": args.orders, "budget": 0.1, "points": {}}
    pools = [attacker_pool(seed=np.random.SeedSequence([1234, k])) for k in range(args.orders)]
    for tokens in (1_000, 2_000, 5_000, 20_000):
        rates = {"exact": [], "z": []}
        for pool in pools:
            row = stealing_point(pool, tokens, config, budgets=(0.1,), scrub_budgets=(0.2,))
            for test in rates:
                rates[test].append(row["forge"][test]["0.1"]["rate"])
        out["points"][str(tokens)] = {t: {"min": min(v), "max": max(v), "rates": v} for t, v in rates.items()}
        print(tokens, out["points"][str(tokens)]["exact"], flush=True)
    _write(ORDERS_FILE, out)


def _generate_forgeries(model, tokenizer, proc, batch) -> list[Any]:
    import torch

    from chainmark.embed import Sampling, generate as cm_generate
    from cmlab.comparison.quality import self_perplexity
    from cmlab.harness.reference.protocol import PROTOCOL

    with torch.no_grad():
        gens = cm_generate(model, tokenizer, [q for _, _, q in batch.items], extra_processors=[proc],
                           sampling=Sampling(max_new_tokens=PROTOCOL.max_new_tokens,
                                             min_new_tokens=PROTOCOL.max_new_tokens,
                                             temperature=PROTOCOL.temperature, seed=batch.seed,
                                             batch_size=len(batch.items)))
        return list(zip(gens, self_perplexity(model, gens)))


def adaptive(args: argparse.Namespace) -> None:
    """The model check against a stronger forger: the generator with a map stolen from the whole pool that also
    forces where its belief is unsure (every seen token's likeliest state), checked by the model."""
    import torch

    from chainmark.detection import detect
    from chainmark.embed import logits_width
    from cmlab.comparison.model_check import model_check
    from cmlab.comparison.stealing import StolenMapProcessor, steal
    from cmlab.harness.models import load_model

    config, pool, gate = reference_config(), attacker_pool(), reference_gate()
    model, tokenizer = load_model()
    vocab = logits_width(model)
    stolen = steal(pool.watermarked, pool.baseline, config.S, config.rho, pool.vocab_size)
    rows = []
    for batch in generator_batches(args.texts):
        proc = StolenMapProcessor(stolen, gate.tau, vocab, min_confidence=0.0)
        for g, q in _generate_forgeries(model, tokenizer, proc, batch):
            with torch.no_grad():
                check = model_check(model, g.prompt_ids, g.token_ids, config, gate)
            rows.append({"exact_flagged": bool(detect(g.token_ids, config, vocab_size=vocab, test="exact")
                                               .is_watermarked), "verified": check.verified, "share": check.share,
                         "self_ppl": float(q)})
        print(f"b{batch.index:03d}: {sum(r['exact_flagged'] for r in rows)}/{len(rows)} flagged, "
              f"{sum(r['verified'] for r in rows)} verified", flush=True)
    flagged = [r for r in rows if r["exact_flagged"]]
    _write(ADAPTIVE_FILE, {
        "tokens_observed": pool.pool_tokens, "texts": len(rows), "flagged": len(flagged),
        "verified": sum(r["verified"] for r in rows), "verified_among_flagged": sum(r["verified"] for r in flagged),
        "median_share_flagged": float(np.median([r["share"] for r in flagged])) if flagged else None,
        "median_self_ppl": float(np.median([r["self_ppl"] for r in rows]))})


def context(args: argparse.Namespace) -> None:
    """The context-keyed variant on the reference run (no model): see ``measure_context_keyed``."""
    from cmlab.harness.context_keyed import CONTEXT_FILE, measure_context_keyed

    data = measure_context_keyed()
    _write(CONTEXT_FILE, data)
    print(json.dumps({k: data[k] for k in ("power", "stealing")}, indent=1))


def context_generate(args: argparse.Namespace) -> None:
    """The generator forgers against the variant, forcing at the published gate's threshold: one with the pairs'
    fitted states, one replaying the triples the replies over-represent; scored by the variant's exact test.
    Resumable per batch."""
    from cmlab.comparison.context_keyed import ReplayProcessor, StolenPairProcessor, context_detect, replay_table
    from cmlab.comparison.context_keyed import steal_pairs
    from cmlab.harness.context_keyed import CONTEXT_GENERATED_DIR, CONTEXT_GENERATORS, context_pool
    from cmlab.harness.models import load_model

    config, pool, tau = reference_config(), context_pool(), reference_gate().tau
    model, tokenizer = load_model()
    for how, tokens, texts in CONTEXT_GENERATORS:
        seen = pool.watermarked if tokens is None else first_tokens(pool.watermarked, tokens)
        observed = sum(map(len, seen))
        if how == "states":
            stolen = steal_pairs(seen, pool.baseline, config.S, config.rho)
            make, known = (lambda: StolenPairProcessor(stolen, tau)), stolen.n_known()
        else:
            table = replay_table(seen, pool.baseline, config.S, config.rho)
            make, known = (lambda: ReplayProcessor(table, tau)), len(table)
        for batch in generator_batches(texts):
            path = CONTEXT_GENERATED_DIR / f"{how}_t{observed}_b{batch.index:03d}.jsonl.gz"
            if path.exists():
                continue
            t0 = time.perf_counter()
            proc = make()
            lines = []
            for (domain, index, _), (g, q) in zip(batch.items, _generate_forgeries(model, tokenizer, proc, batch)):
                verdicts = {t: context_detect(g.token_ids, config, test=t) for t in ("exact", "z")}
                lines.append({"attack": how, "tokens_observed": observed, "known": known, "domain": domain,
                              "prompt_index": index, "seed": batch.seed, "prompt_ids": list(g.prompt_ids),
                              "token_ids": g.token_ids, "self_ppl": float(q),
                              **{f"{t}_p": v.p_value for t, v in verdicts.items()},
                              **{f"{t}_flagged": bool(v.is_watermarked) for t, v in verdicts.items()}})
            lines[0]["forced_steps"], lines[0]["steps"] = proc.forced, proc.steps
            CONTEXT_GENERATED_DIR.mkdir(parents=True, exist_ok=True)
            atomic_write(path, gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode("utf-8"), mtime=0))
            print(f"{how} t{observed} b{batch.index:03d}: {sum(x['exact_flagged'] for x in lines)}/{len(lines)} "
                  f"flagged (exact), {proc.forced} forced of {proc.steps} steps, {time.perf_counter() - t0:.0f} s",
                  flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    sub.add_parser("curve", help="the curves against watermarked tokens observed").set_defaults(func=curve)
    k = sub.add_parser("keyset", help="keys per account: attribution and power")
    k.add_argument("--accounts", type=int, default=100)
    k.add_argument("--tokens", type=int, default=20_000)
    k.add_argument("--budget", type=float, default=0.2)
    k.set_defaults(func=keyset)
    sub.add_parser("generate", help="the generator forger on the embedded model").set_defaults(func=generate)
    sub.add_parser("modelcheck", help="the model-checked verification of real and forged replies").set_defaults(
        func=modelcheck)
    o = sub.add_parser("orders", help="the curve's spread over collection orders")
    o.add_argument("--orders", type=int, default=5)
    o.set_defaults(func=orders)
    a = sub.add_parser("adaptive", help="the generator with the whole pool's map, model-checked")
    a.add_argument("--texts", type=int, default=100)
    a.set_defaults(func=adaptive)
    sub.add_parser("context", help="the context-keyed variant measured (no model)").set_defaults(func=context)
    sub.add_parser("context-generate", help="the generator forger against the context-keyed variant").set_defaults(
        func=context_generate)
    args = parser.parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
