"""Explorers for S, rho and delta: sliders on the static site, ipywidgets in a live kernel.

Each explorer exists twice, from the same data:

* **static** (the default, ``live=False``): an HTML block with the sliders,
  read-outs and plots drawn by a small vanilla-JavaScript file shipped in
  this package (``chainmark/data/explorers.js``), inlined into the block
  together with the data as JSON. It needs no kernel, no network, no
  RequireJS and no widget manager, so it works on the built site (even
  offline), in Jupyter, in Colab and in VS Code. The closed forms of
  :mod:`chainmark.calibrate` are re-implemented in that file (the tests check
  them against the Python functions); everything a model produced is
  precomputed when the book is built (:func:`cmlab.harness.grids.embedding_grid`,
  :func:`cmlab.harness.grids.robustness_grid`); this module only draws.
* **live** (``live=True``): ``ipywidgets`` controls whose callbacks recompute
  in Python (closed forms, detection after a fresh attack, or a new
  generation with the model). Widgets need a kernel, so the static site
  shows the static twin.

Neither form ever holds the key: the data carry token ids, states and
scores, and the live twins receive the key as an argument and keep it out of
every widget's state.
"""
from __future__ import annotations

import hashlib
import html
import itertools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence

import numpy as np

from cmlab.harness.grids import attack_curve, generate_example
from chainmark.config import ChainMarkConfig
from chainmark.jsonio import to_jsonable
from cmlab.teaching.plots import STATE_COLOURS

#: Slider values of the calibration explorer (the static and the live twin use the same).
_ALPHAS: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 1e-3, 0.005, 0.01, 0.02, 0.05, 0.1)
LENGTHS: tuple[int, ...] = (10, 16, 25, 32, 50, 64, 100, 128, 200, 256, 300, 500, 750, 1000, 2000)
_RHOS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 21))
_KS: tuple[int, ...] = (1, 2, 3, 4, 6, 8)

_counter = itertools.count()


# ---------------------------------------------------------------------------
# the static block
# ---------------------------------------------------------------------------
def _asset(name: str) -> str:
    """A file of chainmark/data, made safe to inline in an HTML <script> or <style>."""
    text = resources.files("cmlab").joinpath("data", name).read_text(encoding="utf-8")
    return text.replace("</", "<\\/")


def _script_json(obj: Any) -> str:
    """JSON safe to place inside a <script> element (no '</', no bare U+2028/9)."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@dataclass(frozen=True)
class BrowserAsset:
    """A browser-side widget's code: its files ``<name>.css`` and ``<name>.js`` among the package's assets,
    the global its script defines (``window.<namespace>.mountFrom``), the CSS class of its block and what
    the block calls it when JavaScript is off."""

    name: str
    namespace: str
    css_class: str
    what: str = "explorer"


#: The explorers' code (:class:`_StaticExplorer`).
_EXPLORERS = BrowserAsset("explorers", "ChainMarkExplorers", "cm-explorer", "explorer")


def browser_block(asset: BrowserAsset, uid_prefix: str, title: str, note: str, data: Any, attrs: str = "") -> str:
    """A self-contained HTML block: the ``asset``'s CSS, mount.js and its script inlined, ``data`` as JSON.

    Nothing is fetched, so the block works on the static site, from file://
    and in a notebook. The id, from ``uid_prefix``, is unique per block.
    """
    css_class, namespace, what = asset.css_class, asset.namespace, asset.what
    asset_name = asset.name
    payload = _script_json(data)
    uid = f"{uid_prefix}-{hashlib.sha256(payload.encode('utf-8')).hexdigest()[:10]}-{next(_counter)}"
    note_html = f'<div class="cm-note">{html.escape(note)}</div>' if note else ""
    return (
        f'<div class="{css_class}" id="{uid}"{attrs}>'
        f"<style>{_asset(asset_name + '.css')}</style>"
        f'<div class="cm-title">{html.escape(title)}</div>{note_html}'
        f'<div class="cm-fallback">This {what} runs in your browser with JavaScript; '
        "if you see this line, JavaScript is off or the output is not trusted.</div>"
        '<div class="cm-body"></div>'
        f'<script type="application/json" class="cm-data">{payload}</script>'
        "</div>"
        f"<script>{_asset('mount.js')}\n{_asset(asset_name + '.js')}\n"
        f'window.{namespace}.mountFrom(document.currentScript, "{uid}");</script>'
    )


def standalone_page(title: str, body: str) -> str:
    """A complete HTML document around one block."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title></head><body>{body}</body></html>")


class _StaticExplorer:
    """An explorer as a self-contained HTML+JavaScript block (what the site shows).

    Displaying it in a notebook renders the block (``_repr_html_``);
    :meth:`page` wraps it in a complete HTML document.
    """

    KINDS = ("calibration", "embedding", "robustness")

    def __init__(self, kind: str, data: dict[str, Any], title: str, note: str = ""):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        self.kind = kind
        self.data = to_jsonable(data)
        self.title = title
        self.note = note

    @property
    def html(self) -> str:
        return browser_block(_EXPLORERS, f"cm-{self.kind}", self.title, self.note, self.data,
                             attrs=f' data-kind="{self.kind}"')

    def _repr_html_(self) -> str:
        return self.html

    def page(self) -> str:
        """A complete standalone HTML page holding only this explorer."""
        return standalone_page(self.title, self.html)

    def __repr__(self) -> str:
        return f"StaticExplorer(kind={self.kind!r}, title={self.title!r})"


def _nearest(values: Sequence[Any], x: Any) -> Any:
    return min(values, key=lambda v: abs(v - x))


# ---------------------------------------------------------------------------
# calibration explorer: closed forms only
# ---------------------------------------------------------------------------
def calibration_numbers(alpha: float, n: int, rho: float, k: int = 1) -> dict[str, float]:
    """What the calibration explorer shows, from :mod:`chainmark.calibrate`.

    S* for (n, rho, alpha, k), and at S = S* the predicted z, the midpoint
    threshold on phi and the Hoeffding bound on the midpoint detector's FPR.
    """
    from chainmark.calibrate import hoeffding_fpr_bound, midpoint_threshold, predicted_z, s_star, z_alpha

    S = s_star(n, rho, alpha, k)
    return {
        "z_alpha": z_alpha(alpha),
        "s_star": S,
        "predicted_z": predicted_z(n, rho, S, k),
        "midpoint_threshold": midpoint_threshold(rho, S, k),
        "fpr_bound": hoeffding_fpr_bound(n, rho, S, k),
    }


def calibration_explorer(alpha: float = 0.01, n: int = 200, rho: float = 0.5, k: int = 1,
                         live: bool = False) -> Any:
    """Sliders for (alpha, n, rho, k) -> S*, predicted z, midpoint threshold, FPR bound.

    Start values snap to the nearest slider value. ``live=True`` returns the
    ipywidgets twin, which recomputes with the Python closed forms.
    """
    start = {"alpha": _nearest(_ALPHAS, alpha), "n": _nearest(LENGTHS, n),
             "rho": _nearest(_RHOS, rho), "k": _nearest(_KS, k)}
    if live:
        return _calibration_widget(start)
    data = {"alphas": _ALPHAS, "ns": LENGTHS, "rhos": _RHOS, "ks": _KS, "start": start}
    return _StaticExplorer(
        "calibration", data, "Calibration explorer: from (α, n, ρ, k) to S*",
        "Computed in your browser from the closed forms; the plots show S = k+1 … max(2·S*, k+30).")


def _calibration_widget(start: dict[str, Any]) -> Any:
    import ipywidgets as W
    import matplotlib.pyplot as plt

    from chainmark.calibrate import hoeffding_fpr_bound, predicted_z

    sliders = {
        "alpha": W.SelectionSlider(options=list(_ALPHAS), value=start["alpha"], description="α"),
        "n": W.SelectionSlider(options=list(LENGTHS), value=start["n"], description="n (tokens)"),
        "rho": W.SelectionSlider(options=list(_RHOS), value=start["rho"], description="ρ"),
        "k": W.SelectionSlider(options=list(_KS), value=start["k"], description="k"),
    }
    readout = W.HTML()
    plots = W.Output()

    def update(_: Any = None) -> None:
        a, n, r, k = (sliders[x].value for x in ("alpha", "n", "rho", "k"))
        v = calibration_numbers(a, n, r, k)
        readout.value = _readout_html([
            ("z_α", f"{v['z_alpha']:.3f}"), ("S*", str(v["s_star"])),
            ("predicted z at S*", f"{v['predicted_z']:.3f}"),
            ("midpoint threshold at S*", f"{v['midpoint_threshold']:.4f}"),
            ("Hoeffding FPR bound at S*", f"{v['fpr_bound']:.3g}"),
        ])
        S_max = max(2 * v["s_star"], k + 30)
        Ss = np.arange(k + 1, S_max + 1)
        with plots:
            plots.clear_output(wait=True)
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
            ax1.plot(Ss, [predicted_z(n, r, int(S), k) for S in Ss])
            ax1.axhline(2 * v["z_alpha"], color="C3", ls="--", label="2 z_α (midpoint rule)")
            ax1.axvline(v["s_star"], color="C2", label=f"S* = {v['s_star']}")
            ax1.set(xlabel="number of states S", ylabel="predicted z (SDs)")
            ax1.legend(fontsize=8)
            ax2.semilogy(Ss, [hoeffding_fpr_bound(n, r, int(S), k) for S in Ss], color="C4")
            ax2.axhline(a, color="C3", ls="--", label=f"α = {a}")
            ax2.axvline(v["s_star"], color="C2")
            ax2.set(xlabel="number of states S", ylabel="Hoeffding FPR bound")
            ax2.legend(fontsize=8)
            fig.tight_layout()
            plt.show()

    for s in sliders.values():
        s.observe(update, names="value")
    update()
    return W.VBox([W.HBox(list(sliders.values())[:2]), W.HBox(list(sliders.values())[2:]), readout, plots])


def _readout_html(items: Sequence[tuple[str, str]]) -> str:
    cells = "".join(
        f'<div style="border:1px solid #e1e5ee;background:#f5f8fd;border-radius:4px;padding:3px 8px;'
        f'margin:2px;display:inline-block"><div style="font-size:11px;color:#4a5060">{html.escape(k)}</div>'
        f'<div style="font-size:16px;font-weight:700">{html.escape(v)}</div></div>' for k, v in items)
    return f"<div>{cells}</div>"


# ---------------------------------------------------------------------------
# embedding explorer: a grid of generations over S x rho
# ---------------------------------------------------------------------------
def _grid_cell(grid: dict[str, Any], S: int, rho: float) -> dict[str, Any]:
    for c in grid["cells"]:
        if c["S"] == S and c["rho"] == rho:
            return c
    raise ValueError(f"the grid has no cell S = {S}, rho = {rho}; "
                     f"S in {grid['S_values']}, rho in {grid['rho_values']}")


def embedding_explorer(grid: dict[str, Any], S: int = 5, rho: float = 0.5, live: bool = False,
                       model: Any = None, tokenizer: Any = None, key: Any = None) -> Any:
    """Sliders over an (S, rho) grid of :func:`cmlab.harness.grids.embedding_grid`: a coloured text, phi, z, PPL.

    The grid may also come from :func:`cmlab.harness.reference.explorer_grid` (the
    committed reference run); its ``caption`` then says so under the explorer.

    ``live=True`` gives the ipywidgets twin; with ``model``, ``tokenizer`` and
    ``key`` it also has a button that generates a fresh text at the chosen
    (S, rho) with the model.
    """
    start = {"S": _nearest(grid["S_values"], S), "rho": _nearest(grid["rho_values"], rho)}
    if live:
        return _embedding_widget(grid, start, model, tokenizer, key)
    cells = [{k: v for k, v in c.items() if k != "texts"} for c in grid["cells"]]
    data = {"S_values": grid["S_values"], "rho_values": grid["rho_values"], "cells": cells,
            "baseline_ppl": grid["baseline_ppl"], "colours": STATE_COLOURS, "start": start}
    caption = grid.get("caption") or (
        f"Precomputed when this page was built: {grid['model']}, {len(grid['prompts'])} prompts × "
        f"{grid['max_new_tokens']} new tokens per cell, gate '{grid['gate']}', seed 42.")
    return _StaticExplorer("embedding", data, "Embedding explorer: what S and ρ do to a generation", caption)


def _embedding_widget(grid: dict[str, Any], start: dict[str, Any], model: Any, tokenizer: Any,
                      key: Any) -> Any:
    import ipywidgets as W

    from chainmark.gates import Gate
    from cmlab.teaching.plots import tokens_html

    S_slider = W.SelectionSlider(options=grid["S_values"], value=start["S"], description="S")
    rho_slider = W.SelectionSlider(options=grid["rho_values"], value=start["rho"], description="ρ")
    view = W.HTML()

    def show(cell_like: dict[str, Any], S: int, source: str) -> None:
        ex = cell_like["example"]
        view.value = (f"<div style='font-size:12px;color:#555'>{html.escape(source)} — prompt: "
                      f"{html.escape(ex['prompt'])}</div>" + _readout_html([
                          ("tokens n", str(ex["n_tokens"])), ("realised ρ", f"{ex['rho_realised']:.2f}"),
                          ("φ", f"{ex['phi']:.3f}"), ("z", f"{ex['z']:.2f}"),
                          ("p-value", f"{ex['p_value']:.3g}"), ("self-PPL", f"{ex['self_ppl']:.2f}")])
                      + tokens_html(ex["tokens"], ex["states"], ex["forced"], legend_S=S))

    def update(_: Any = None) -> None:
        show(_grid_cell(grid, S_slider.value, rho_slider.value), S_slider.value, "precomputed")

    S_slider.observe(update, names="value")
    rho_slider.observe(update, names="value")
    children: list[Any] = [W.HBox([S_slider, rho_slider])]
    if model is not None and tokenizer is not None and key is not None:
        button = W.Button(description="generate now", tooltip="generate with the model at this S and ρ")

        def regenerate(_: Any) -> None:
            button.disabled = True
            try:
                from chainmark.embed import Sampling

                S, r = S_slider.value, rho_slider.value
                config = ChainMarkConfig(key, S=S, rho=r, gate=grid["gate"])
                show(generate_example(model, tokenizer, config, Gate(grid["gate"], grid["taus"][str(r)], r),
                                      grid["prompts"][0], alpha=grid["alpha"],
                                      sampling=Sampling(max_new_tokens=grid["max_new_tokens"])),
                     S, "generated now")
            finally:
                button.disabled = False

        button.on_click(regenerate)
        children[0].children += (button,)
    children.append(view)
    update()
    return W.VBox(children)


# ---------------------------------------------------------------------------
# robustness explorer: substitution at rate delta
# ---------------------------------------------------------------------------
def robustness_explorer(grid: dict[str, Any], delta: float = 0.2, live: bool = False,
                        key: Any = None) -> Any:
    """A slider over delta: observed z ratio against (1 - delta)^2, and the TPR.

    ``live=True`` gives the ipywidgets twin; with ``key`` it re-attacks the
    model texts at any delta in [0, 0.6] and detects them in Python.
    """
    start = {"delta": _nearest(grid["deltas"], delta)}
    if live:
        return _robustness_widget(grid, start, key)
    data = {"deltas": grid["deltas"], "alpha": grid["alpha"], "colours": STATE_COLOURS, "start": start,
            "mc": {k: grid["mc"][k] for k in ("ratio", "tpr")},
            "text": {k: grid["text"][k] for k in ("ratio", "tpr", "examples")}}
    return _StaticExplorer(
        "robustness", data, "Robustness explorer: random substitution at rate δ",
        f"S = {grid['S']}, ρ = {grid['rho']}, α = {grid['alpha']}; model text: {grid['text']['n_texts']} "
        f"watermarked generations; Monte Carlo: {grid['mc']['trials']} sequences of "
        f"{grid['mc']['length']} tokens; attack seed {grid['seed']}.")


def _robustness_widget(grid: dict[str, Any], start: dict[str, Any], key: Any) -> Any:
    import ipywidgets as W

    delta = W.FloatSlider(value=start["delta"], min=0.0, max=0.6, step=0.01, description="δ")
    view = W.HTML()

    def update(_: Any = None) -> None:
        d = float(delta.value)
        items = [("(1−δ)²", f"{(1 - d) ** 2:.3f}")]
        if key is not None:  # recompute on the model texts at exactly this delta
            curve = attack_curve(grid["texts"], ChainMarkConfig(key, S=grid["S"]), grid["vocab_size"], [d],
                                 grid["alpha"], grid["seed"])
            items += [("z ratio, model text (now)", f"{curve['ratio'][0]:.3f}"),
                      ("TPR, model text (now)", f"{curve['tpr'][0]:.2f}")]
        i = int(np.argmin([abs(x - d) for x in grid["deltas"]]))
        items += [(f"z ratio, Monte Carlo (δ = {grid['deltas'][i]})", f"{grid['mc']['ratio'][i]:.3f}"),
                  (f"TPR, Monte Carlo (δ = {grid['deltas'][i]})", f"{grid['mc']['tpr'][i]:.2f}")]
        view.value = _readout_html(items)

    delta.observe(update, names="value")
    update()
    return W.VBox([delta, view])


__all__ = ["BrowserAsset", "LENGTHS", "browser_block", "calibration_explorer", "calibration_numbers",
           "embedding_explorer", "robustness_explorer", "standalone_page"]
