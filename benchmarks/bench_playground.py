"""Benchmark: the attack playground's re-score after a keystroke on a 400-token text, against the bare scoring
loop over the same tokens in the same page, in one run.

    .venv/bin/python benchmarks/bench_playground.py [--tokens 400] [--keystrokes 40] [--max-ratio 10000]

The book's playground (``cmlab.teaching.playground.attack_playground``) is
opened as a standalone page in headless Chromium, driven by Playwright as the
browser tests drive it (``tests/browser_support.py``: served on 127.0.0.1,
nothing leaves the machine). A text of ``--tokens`` tokens (the page's own
samples, repeated) is pasted into the box, then ``--keystrokes`` real key
events are typed at moving caret positions; after each, the page's own
re-score time is read (its ``ms`` readout: tokenize, look up states, score,
the Levenshtein distance to the original, redraw). The baseline is timed in
the same page right after each keystroke: the loop every re-score must run
at least, the state of each token of the text now in the box and its legal
steps (``--loop-reps`` times, per repetition). Each keystroke gives a paired
ratio (re-score / bare loop), so a machine that is slow or loaded for both
moves the ratio little. Printed: the medians, the 90th percentile and the
maximum of the re-score, the median ratio, and the re-score against one
frame at 60 Hz (16 ms, indicative: that is this machine's absolute time).
The exit status is 1 if the median ratio exceeds ``--max-ratio``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser_support import GuardedPage, chromium_path, launch, serve  # noqa: E402

FRAME_MS = 1000 / 60
ROOT_JS = "document.querySelectorAll('.cm-playground')[0]"
INST_JS = f"ChainMarkPlayground.instances[{ROOT_JS}.id]"
# the scoring loop alone, on the ids of the text in the box: states, then legal steps (clockwork)
BARE_LOOP_JS = """((reps, S) => {
  const P = %s, ids = Int32Array.from(P.tokenizer.encode(P.textarea.value)), T = P.table;
  let legal = 0;
  const t0 = performance.now();
  for (let r = 0; r < reps; r++) {
    let prev = T[ids[0]];
    for (let i = 1; i < ids.length; i++) {
      const s = T[ids[i]], d = s - prev;
      if (d === 1 || d === 1 - S) { legal++; }
      prev = s;
    }
  }
  return [(performance.now() - t0) / reps, legal, ids.length];
})(%d, %d)"""


def _long_text(page: GuardedPage, tokenizer: Any, tokens: int) -> str:
    """The page's samples joined and repeated, cut to ``tokens`` tokens."""
    samples = json.loads(page.js(f"{ROOT_JS}.querySelector('script.cm-data').textContent"))["samples"]
    ids = tokenizer.encode(" ".join(s["text"] for s in samples), add_special_tokens=False)
    while len(ids) < tokens:
        ids = ids + ids
    return tokenizer.decode(ids[:tokens])


def _paste(page: GuardedPage, text: str) -> float:
    """Put ``text`` in the box as a paste would (one input event), from an empty piece cache; the page's ms."""
    page.js(f"{INST_JS}.tokenizer.cache.clear()")
    page.js(f"(() => {{ const t = {INST_JS}.textarea; t.value = {json.dumps(text)};"
            "t.dispatchEvent(new Event('input')); })()")
    return _shown_ms(page)


def _shown_ms(page: GuardedPage) -> float:
    return float(page.js(f"{ROOT_JS}.querySelector('[data-field=ms]').getAttribute('data-value')"))


def _keystroke(page: GuardedPage, i: int) -> None:
    """One real key event at a caret position that moves through the text (a space every third key)."""
    length = page.js(f"{INST_JS}.textarea.value.length")
    page.js(f"(() => {{ const t = {INST_JS}.textarea; t.focus(); const at = {length * (i % 5) // 5};"
            "t.setSelectionRange(at, at); })()")
    page.type_keys("a" if i % 3 else " ")


def _session(page: GuardedPage, tokenizer: Any, tokens: int, keystrokes: int, loop_reps: int,
             S: int) -> dict[str, Any]:
    """Paste the text, then after each keystroke read the page's re-score time and time the bare loop."""
    text = _long_text(page, tokenizer, tokens)
    cold = _paste(page, text)
    rescore, loop, n = [], [], 0
    for i in range(keystrokes):
        _keystroke(page, i)
        rescore.append(_shown_ms(page))
        ms, _, n = page.js(BARE_LOOP_JS % (INST_JS, loop_reps, S))
        loop.append(ms)
    return {"tokens": len(tokenizer.encode(text, add_special_tokens=False)), "tokens_after": n,
            "keystrokes": keystrokes, "loop_reps": loop_reps, "cold_paste_ms": cold, "rescore_ms": rescore,
            "bare_loop_ms": loop}


def _summary(out: dict[str, Any]) -> dict[str, Any]:
    """Medians, the 90th percentile and the maximum of the re-score, and the median paired ratio."""
    rescore, loop = out["rescore_ms"], out["bare_loop_ms"]
    ratios = [r / max(b, 1e-9) for r, b in zip(rescore, loop)]
    return {**out, "rescore_median_ms": statistics.median(rescore),
            "rescore_p90_ms": sorted(rescore)[int(0.9 * len(rescore)) - 1], "rescore_max_ms": max(rescore),
            "bare_loop_median_ms": statistics.median(loop), "ratio_median": statistics.median(ratios)}


def measure(browser: Any, tokenizer: Any, tokens: int, keystrokes: int, loop_reps: int, S: int) -> dict[str, Any]:
    """The book's playground as a standalone page on 127.0.0.1: ``keystrokes`` re-scores and bare loops, summarised."""
    from cmlab.teaching.playground import attack_playground

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "playground.html").write_text(attack_playground(tokenizer).page(), encoding="utf-8")
        with serve(Path(folder)) as url:
            page = GuardedPage(browser)
            try:
                page.open(url + "playground.html")
                return _summary(_session(page, tokenizer, tokens, keystrokes, loop_reps, S))
            finally:
                page.close()


def _report(out: dict[str, Any], max_ratio: float) -> None:
    print(f"re-score after a keystroke, {out['tokens']} tokens pasted ({out['tokens_after']} after "
          f"{out['keystrokes']} keystrokes): median "
          f"{out['rescore_median_ms']:.2f} ms, 90th percentile {out['rescore_p90_ms']:.2f} ms, max "
          f"{out['rescore_max_ms']:.2f} ms (first scoring of the pasted text, empty cache: "
          f"{out['cold_paste_ms']:.2f} ms)")
    print(f"bare scoring loop over the same tokens, same page: median {1000 * out['bare_loop_median_ms']:.2f} µs")
    print(f"ratio (re-score / bare loop, paired per keystroke, median): {out['ratio_median']:.0f}x  "
          f"(allowed <= {max_ratio:g}x)")
    print(f"median re-score / one frame at 60 Hz ({FRAME_MS:.1f} ms): {out['rescore_median_ms'] / FRAME_MS:.2f} "
          "(this machine's absolute time, indicative)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=400, help="length of the pasted text, in tokens")
    parser.add_argument("--keystrokes", type=int, default=40)
    parser.add_argument("--loop-reps", type=int, default=2000, help="repetitions of the bare loop per timing")
    parser.add_argument("--max-ratio", type=float, default=10_000.0,
                        help="largest allowed median ratio of the re-score to the bare loop (the 2-core machine "
                             "measures about 6,000)")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    binary = chromium_path()
    if binary is None:
        print("Chromium is not installed: `apt-get install -y chromium` (make browser does)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from chainmark.auditor.tokenizer import DEFAULT_MODEL, load_tokenizer
    from cmlab.teaching.playground import PLAYGROUND_S

    tokenizer = load_tokenizer(DEFAULT_MODEL)
    with sync_playwright() as playwright:
        browser = launch(playwright, binary)
        try:
            out = measure(browser, tokenizer, args.tokens, args.keystrokes, args.loop_reps, PLAYGROUND_S)
        finally:
            browser.close()
    _report(out, args.max_ratio)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0 if out["ratio_median"] <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
