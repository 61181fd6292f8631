"""Forecast times of every chapter on Colab's GPUs, before anyone has measured them there.

No chapter of the book has been timed on a GPU. This module forecasts those
times from what has been measured and from what the GPUs' datasheets say, with
the same model of a generation that a chapter's forecast line uses
(:func:`cmlab.teaching.forecast.step_seconds`):

- a chapter's **long steps** are those its forecast line lists (:data:`CHAPTER_WORK`,
  at the smoke and the full scale): texts, new tokens each, batch size;
- a **decoding step** of a batch on a GPU reads every weight once, so it takes
  the weights' bytes over the memory bandwidth actually reached (:data:`BANDWIDTH_SHARE`
  of the datasheet's), plus a fixed cost per step for the Python and kernel-launch work
  of ``transformers``' ``generate`` and the watermark's processor (:data:`STEP_FLOOR_SECONDS`);
  a prompt's pass is compute-bound: two operations per weight and token at :data:`FLOPS_SHARE`
  of the datasheet's float16 throughput;
- **the rest** of a chapter (imports, detection, simulations, plots) is its measured CPU time at
  the smoke scale (``book/data/chapter_timings.json``) less the forecast of its generation on
  that CPU (:data:`_CPU_STEP_SECONDS`, from the book's benchmarks); Colab's CPU is taken to be
  as fast as the build machine's, and at the full scale the rest takes :data:`REST_FULL_FACTOR`
  times as long;
- a Hub model loads from Colab's disk at :data:`LOAD_BYTES_PER_SECOND` in every chapter (its
  download, once per session, is not counted); a model that does not fit the GPU's memory
  (:func:`cmlab.harness.models.memory_needed`) gets no time.

These are forecasts, to plan a session with, not measurements.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from chainmark.auditor.tokenizer import DEFAULT_MODEL
from cmlab.harness.models import EMBEDDED_PARAMS, memory_needed
from cmlab.teaching.forecast import Step, step_seconds

__all__ = ["BANDWIDTH_SHARE", "CHAPTER_WORK", "COLAB_GPUS", "FLOPS_SHARE", "FORECAST_MODELS", "ForecastModel", "Gpu",
           "LOAD_BYTES_PER_SECOND", "REST_FULL_FACTOR", "STEP_FLOOR_SECONDS", "Work", "chapter_timings",
           "chapter_titles", "colab_forecast_table", "gpu_table"]


@dataclass(frozen=True)
class Gpu:
    """A Colab GPU as its datasheet describes it, with the memory a Colab session can use."""

    name: str
    memory_gb: float       # what Colab leaves free for a session (cmlab.harness.models.check_fits says the same)
    bandwidth_gb_s: float  # memory bandwidth, datasheet
    fp16_tflops: float     # dense float16 tensor throughput, datasheet
    dtype: str             # what the book loads on it (float16 where bfloat16 is missing)
    source: str


#: The three GPUs a Colab user meets, from NVIDIA's datasheets (dense figures, without sparsity).
COLAB_GPUS: tuple[Gpu, ...] = (
    Gpu("T4", 15.0, 320.0, 65.0, "float16", "NVIDIA T4 datasheet (16 GB GDDR6)"),
    Gpu("L4", 22.0, 300.0, 121.0, "bfloat16", "NVIDIA L4 datasheet (24 GB GDDR6)"),
    Gpu("A100", 40.0, 1555.0, 312.0, "bfloat16", "NVIDIA A100 40 GB datasheet (HBM2)"),
)


@dataclass(frozen=True)
class ForecastModel:
    """A chat model of the table: its label, its Hub id and its parameter count (from its model card)."""

    label: str
    hub_id: str
    params: int


#: The embedded model, a 1.5B and a 7B instruction-tuned chat model (both ungated on the Hub).
FORECAST_MODELS: tuple[ForecastModel, ...] = (
    ForecastModel("SmolLM2-135M (embedded)", DEFAULT_MODEL, EMBEDDED_PARAMS),
    ForecastModel("Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", 1_540_000_000),
    ForecastModel("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", 7_620_000_000),
)

#: Share of the datasheet's memory bandwidth a decoding step reaches (an assumption).
BANDWIDTH_SHARE = 0.6
#: Share of the datasheet's float16 throughput a prompt's pass reaches (an assumption).
FLOPS_SHARE = 0.4
#: Fixed seconds per decoding step on a GPU, whatever the model: generate's Python loop, kernel launches,
#: the logits processor and sampling (an assumption; about 40 tokens a second for a small model).
STEP_FLOOR_SECONDS = 0.025
#: Seconds per decoding step of the embedded model on the 2-core build machine (float32), by batch size:
#: benchmarks/bench_generation.py's record at commit f4ebf59 (128 tokens at batch 1 in 5.9 s; a later run on a busier
#: day took 9.3 s) and bench_batch.json
#: (80, 124 and 185 tokens a second at batches 8, 16 and 32); other batches are interpolated.
_CPU_STEP_SECONDS: Mapping[int, float] = {1: 5.92 / 128, 8: 8 / 80.2, 16: 16 / 124.1, 32: 32 / 185.0}
#: The rest of a chapter at the full scale, as a multiple of its smoke-scale time (an assumption: larger
#: simulations, more texts to detect and plot).
REST_FULL_FACTOR = 2.0
#: Bytes a second at which a Hub model's weights load from Colab's disk onto the GPU (an assumption).
LOAD_BYTES_PER_SECOND = 1.0e9
#: Tokens of a prompt, as in the chapters' forecast lines.
_PROMPT_TOKENS = 64


@dataclass(frozen=True)
class Work:
    """A chapter's long steps at one scale and the batch size it runs them in."""

    batch: int
    steps: tuple[Step, ...] = ()


def _w(batch: int, *steps: tuple) -> Work:
    return Work(batch, tuple(Step(*s) for s in steps))


#: Each chapter's long steps at the smoke and the full scale, (label, texts, new tokens[, kind]) as its
#: forecast line (``expect_generation``) lists them, with the sizes of its settings cell resolved.
#: Chapters that generate nothing (or a reply of a few dozen tokens) have no steps.
CHAPTER_WORK: Mapping[str, Mapping[str, Work]] = {
    "book/00_first_run": {"smoke": _w(1, ("one reply", 1, 80)), "full": _w(1, ("one reply", 1, 200))},
    "book/00b_tour": {"smoke": _w(2, ("with and without the watermark", 4, 64)),
                      "full": _w(2, ("with and without the watermark", 4, 200))},
    "book/01_partition": {"smoke": _w(1, ("one reply", 1, 64)), "full": _w(1, ("one reply", 1, 160))},
    "book/02_topology": {"smoke": _w(1, ("one reply", 1, 48)), "full": _w(1, ("one reply", 1, 160))},
    "book/03_gates": {"smoke": _w(16, ("unwatermarked", 32, 64), ("watermarked", 16, 64)),
                      "full": _w(16, ("unwatermarked", 48, 256), ("watermarked", 24, 256))},
    "book/04_embedding": {
        "smoke": _w(8, ("pilot", 8, 48), ("Build it", 8, 48), ("with and without", 16, 96),
                    ("every step forced", 4, 48)),
        "full": _w(16, ("pilot", 32, 128), ("Build it", 16, 128), ("with and without", 128, 200),
                   ("every step forced", 8, 128))},
    "book/04b_cost": {"smoke": _w(8, ("pilot", 8, 48), ("with and without", 16, 96), ("grid", 56, 64)),
                      "full": _w(16, ("pilot", 32, 128), ("with and without", 128, 200), ("grid", 224, 200))},
    "book/05_detection": {"smoke": _w(8, ("pilot", 6, 48), ("with and without", 32, 96)),
                          "full": _w(8, ("pilot", 6, 128), ("with and without", 136, 200))},
    "book/05a_false_positives": {"smoke": _w(8, ("pilot", 6, 48), ("with and without", 32, 96)),
                                 "full": _w(8, ("pilot", 6, 128), ("with and without", 136, 200))},
    "book/05b_lr_detector": {"smoke": _w(8, ("pilot", 6, 48), ("with and without", 32, 96)),
                             "full": _w(8, ("pilot", 6, 128), ("with and without", 136, 200))},
    "book/06_calibration": {"smoke": _w(1), "full": _w(1)},
    "book/06b_real_text": {"smoke": _w(8, ("unwatermarked", 16, 128), ("watermarked, three S", 24, 128)),
                           "full": _w(32, ("unwatermarked", 100, 200), ("watermarked, three S", 300, 200))},
    "book/06c_exact_test": {"smoke": _w(1), "full": _w(1)},
    "book/07_robustness": {"smoke": _w(8, ("unwatermarked", 8, 128), ("watermarked", 16, 128)),
                           "full": _w(16, ("unwatermarked", 50, 200), ("watermarked", 100, 200))},
    "book/07b_attacks": {"smoke": _w(8, ("replies", 24, 128), ("rewrites", 18, 160)),
                         "full": _w(16, ("replies", 150, 200), ("rewrites", 900, 320))},
    "book/08_head_to_head": {
        "smoke": _w(12, ("4 methods", 32, 64), ("paraphrases", 24, 96), ("scoring", 80, 64, "score")),
        "full": _w(25, ("4 methods", 1600, 200), ("paraphrases", 1200, 320), ("back-translation", 2400, 320),
                   ("scoring", 4800, 200, "score"))},
    "book/08a_reference": {"smoke": _w(1), "full": _w(1)},
    "book/08b_kregular": {"smoke": _w(8, ("4 methods", 32, 96)),
                          "full": _w(25, ("4 methods", 400, 200), ("back-translation", 800, 400))},
    "book/09_audit": {"smoke": _w(8, ("with and without", 16, 96)), "full": _w(8, ("with and without", 128, 200))},
    "book/09a_recalibration": {"smoke": _w(8, ("with and without", 16, 96)),
                               "full": _w(8, ("with and without", 128, 200))},
    "book/09b_corpus_audit": {"smoke": _w(1), "full": _w(1)},
    "book/09c_segments": {"smoke": _w(1), "full": _w(1)},
    "book/09d_anytime": {"smoke": _w(1), "full": _w(1)},
    "book/09e_stealing": {"smoke": _w(1), "full": _w(1)},
    "book/09f_context_keyed": {"smoke": _w(1), "full": _w(1)},
    "book/09g_serving": {"smoke": _w(6, ("one batch, two accounts", 6, 64)),
                         "full": _w(6, ("one batch, two accounts", 6, 160))},
    "book/10_explorers": {"smoke": _w(8, ("S x rho grid", 80, 48)), "full": _w(8, ("S x rho grid", 832, 200))},
    "book/appendix_paper": {"smoke": _w(1), "full": _w(1)},
}

#: The chapters whose long steps an earlier chapter of their group already ran with the same settings: executed in
#: the book's order (a build, ``tools/measure_chapters.py --run``) they read those texts back from the runs folder
#: (``generate_once``, or chapter 7's run folder), where a Colab notebook, which starts on its own, generates them.
_READ_BACK: Mapping[str, str] = {"book/04b_cost": "book/04_embedding", "book/05a_false_positives": "book/05_detection",
                                "book/05b_lr_detector": "book/05_detection", "book/07b_attacks": "book/07_robustness",
                                "book/09a_recalibration": "book/09_audit"}


def chapter_timings(root: str | Path | None = None) -> dict[str, float]:
    """Each chapter's measured CPU seconds at the smoke scale, keyed ``book/NAME``, from ``book/data/chapter_timings.json``.

    Looks in ``root`` (or the current folder and its parent, then the repository the package is
    installed from); empty when no record is found (a pip install without a clone, as in Colab).
    """
    here = Path(__file__).resolve().parents[3]
    roots = [Path(root)] if root is not None else [Path.cwd(), Path.cwd().parent, here]
    for base in roots:
        path = base / "book" / "data" / "chapter_timings.json"
        if path.is_file():
            data = json.loads(path.read_text("utf-8"))
            return {name.removesuffix(".ipynb"): float(entry["seconds"] if isinstance(entry, dict) else entry)
                    for name, entry in data["chapters"].items()}
    return {}


def chapter_titles(root: str | Path | None = None) -> dict[str, str]:
    """Each chapter's title (its notebook's first heading), keyed ``book/NAME``; empty without the notebooks."""
    here = Path(__file__).resolve().parents[3]
    roots = [Path(root)] if root is not None else [Path.cwd(), Path.cwd().parent, here]
    for base in roots:
        if all((base / f"{c}.ipynb").is_file() for c in CHAPTER_WORK):
            titles = {}
            for chapter in CHAPTER_WORK:
                cells = json.loads((base / f"{chapter}.ipynb").read_text("utf-8"))["cells"]
                first = "".join(cells[0]["source"]).splitlines()[0] if cells else ""
                titles[chapter] = first.lstrip("# ").strip() or chapter
            return titles
    return {}


def _cpu_step(batch: int) -> float:
    """Seconds per decoding step on the build machine at ``batch``, interpolated between the measured batches."""
    points = sorted(_CPU_STEP_SECONDS.items())
    if batch <= points[0][0]:
        return points[0][1]
    for (b0, s0), (b1, s1) in zip(points, points[1:]):
        if batch <= b1:
            return s0 + (s1 - s0) * (batch - b0) / (b1 - b0)
    (b0, s0), (b1, s1) = points[-2:]
    return s1 + (s1 - s0) * (batch - b1) / (b1 - b0)


def _generation_seconds(work: Work, prefill: float, token: float) -> float:
    return sum(step_seconds(s, work.batch, prefill, token, _PROMPT_TOKENS) for s in work.steps)


def _gpu_seconds(work: Work, gpu: Gpu, model: ForecastModel) -> float:
    weight_bytes = 2 * model.params  # float16 or bfloat16
    token = weight_bytes / (gpu.bandwidth_gb_s * 1e9 * BANDWIDTH_SHARE) + STEP_FLOOR_SECONDS
    prefill = (2 * model.params * work.batch * _PROMPT_TOKENS / (gpu.fp16_tflops * 1e12 * FLOPS_SHARE)
               + STEP_FLOOR_SECONDS)
    return _generation_seconds(work, prefill, token)


def _colab_forecast(timings: Mapping[str, float], gpus: Sequence[Gpu] = COLAB_GPUS,
                   models: Sequence[ForecastModel] = FORECAST_MODELS) -> list[dict]:
    """The forecast, one row per chapter, model, GPU and scale: ``seconds`` is ``None`` where the model does not fit.

    ``timings`` maps ``book/NAME`` to the chapter's measured CPU seconds at the smoke scale
    (:func:`chapter_timings`); every chapter there needs an entry in :data:`CHAPTER_WORK`. Each row's
    ``cpu_seconds`` is what that chapter's whole smoke work takes on the measuring CPU: its measured time, but for
    a chapter of :data:`_READ_BACK`, measured reading back texts an earlier chapter stored, the measured time or
    the CPU model's time for generating them (its other work, plus the modelled generation), whichever is more.
    """
    missing = sorted(set(timings) - set(CHAPTER_WORK))
    if missing:
        raise ValueError(f"no long steps recorded in CHAPTER_WORK for {missing}")
    rows = []
    for chapter, measured in timings.items():
        smoke = CHAPTER_WORK[chapter]["smoke"]
        cpu_token = _cpu_step(smoke.batch)
        cpu_prefill = cpu_token * 2  # a prompt's pass on the CPU: about two decoding steps (an assumption)
        cpu_generation = _generation_seconds(smoke, cpu_prefill, cpu_token)
        rest = max(measured - cpu_generation, 0.1 * measured)  # never less than a tenth of the chapter
        cpu_seconds = max(measured, rest + cpu_generation) if chapter in _READ_BACK else measured
        for model in models:
            weights = 2 * model.params
            load = 0.0 if model.hub_id == DEFAULT_MODEL else weights / LOAD_BYTES_PER_SECOND
            for gpu in gpus:
                fits = memory_needed(weights) <= gpu.memory_gb * 1e9
                for scale in ("smoke", "full"):
                    work = CHAPTER_WORK[chapter][scale]
                    seconds = (rest * (REST_FULL_FACTOR if scale == "full" else 1.0) + load
                               + _gpu_seconds(work, gpu, model)) if fits else None
                    rows.append({"chapter": chapter, "model": model.label, "gpu": gpu.name, "scale": scale,
                                 "seconds": seconds, "cpu_seconds": cpu_seconds})
    return rows


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "does not fit"
    minutes = seconds / 60
    return f"{minutes:.1f}" if minutes < 10 else f"{minutes:.0f}" if minutes < 100 else f"{minutes / 60:.1f} h"


def colab_forecast_table(timings: Mapping[str, float], titles: Mapping[str, str] | None = None,
                         gpus: Sequence[Gpu] = COLAB_GPUS, models: Sequence[ForecastModel] = FORECAST_MODELS):
    """The forecast as a table: a row per chapter and one for all of them, a column per model and GPU.

    Each cell reads ``smoke / full`` in minutes (one decimal under ten minutes, hours past 100 minutes),
    or ``does not fit``. ``titles`` maps ``book/NAME`` to the row's label (default: the file's name).
    """
    import pandas as pd

    rows = _colab_forecast(timings, gpus, models)
    seconds = {(r["chapter"], r["model"], r["gpu"], r["scale"]): r["seconds"] for r in rows}
    columns = pd.MultiIndex.from_tuples([(m.label, g.name) for m in models for g in gpus], names=["model", "GPU"])
    labels = [(titles or {}).get(c, c.removeprefix("book/")) for c in timings]
    data = []
    for chapter in [*timings, None]:
        row = []
        for m in models:
            for g in gpus:
                pair = []
                for scale in ("smoke", "full"):
                    if chapter is None:
                        parts = [seconds[(c, m.label, g.name, scale)] for c in timings]
                        pair.append(None if any(p is None for p in parts) else sum(parts))
                    else:
                        pair.append(seconds[(chapter, m.label, g.name, scale)])
                row.append("does not fit" if pair[0] is None else f"{_minutes(pair[0])} / {_minutes(pair[1])}")
        data.append(row)
    return pd.DataFrame(data, index=pd.Index([*labels, "all chapters"], name="chapter"), columns=columns)


def gpu_table():
    """The figures the forecast assumes for each GPU, with where they come from."""
    import pandas as pd

    return pd.DataFrame([{"GPU": g.name, "memory for a session (GB)": f"{g.memory_gb:g}",
                          "memory bandwidth (GB/s)": f"{g.bandwidth_gb_s:,.0f}",
                          "float16 throughput (TFLOPS, dense)": f"{g.fp16_tflops:g}", "weights in": g.dtype,
                          "figures from": g.source} for g in COLAB_GPUS]).set_index("GPU")
