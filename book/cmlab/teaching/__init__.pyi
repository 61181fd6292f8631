"""Static names of ``cmlab.teaching`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import claims as claims
from . import colab as colab
from . import doctor as doctor
from . import edition as edition
from . import forecast as forecast
from . import playground as playground
from . import plots as plots
from . import talks as talks
from . import widgets as widgets
from . import workshop as workshop
from .claims import (
    ClaimFailed as ClaimFailed, book_configuration as book_configuration, claim as claim,
    claims_report as claims_report, notes_under_sentences as notes_under_sentences, pending_notes as pending_notes,
)
from .colab import (
    BANDWIDTH_SHARE as BANDWIDTH_SHARE, CHAPTER_WORK as CHAPTER_WORK, COLAB_GPUS as COLAB_GPUS,
    FLOPS_SHARE as FLOPS_SHARE, FORECAST_MODELS as FORECAST_MODELS, ForecastModel as ForecastModel, Gpu as Gpu,
    LOAD_BYTES_PER_SECOND as LOAD_BYTES_PER_SECOND, REST_FULL_FACTOR as REST_FULL_FACTOR,
    STEP_FLOOR_SECONDS as STEP_FLOOR_SECONDS, Work as Work, chapter_timings as chapter_timings,
    chapter_titles as chapter_titles, colab_forecast_table as colab_forecast_table, gpu_table as gpu_table,
)
from .doctor import (
    Check as Check, estimate as estimate, report as report, run_checks as run_checks,
)
from .edition import (
    GLUE_ROLE as GLUE_ROLE, fill as fill, notebook_edition as notebook_edition, remember as remember,
    show_paragraph as show_paragraph,
)
from .forecast import (
    Expectation as Expectation, Step as Step, duration as duration, expect_generation as expect_generation,
    step_seconds as step_seconds,
)
from .playground import (
    PLAYGROUND_S as PLAYGROUND_S, Playground as Playground, PlaygroundError as PlaygroundError,
    attack_bounds as attack_bounds, attack_playground as attack_playground,
)
from .plots import (
    STATE_COLOURS as STATE_COLOURS, attack_style as attack_style, banner as banner, glue as glue,
    set_theme as set_theme, show_source as show_source, show_tokens as show_tokens, state_colour as state_colour,
    tokens_html as tokens_html,
)
from .talks import (
    OUTLINES_FILE as OUTLINES_FILE, TalkOutline as TalkOutline, load_outlines as load_outlines,
    outline_markdown as outline_markdown,
)
from .widgets import (
    BrowserAsset as BrowserAsset, LENGTHS as LENGTHS, browser_block as browser_block,
    calibration_explorer as calibration_explorer, calibration_numbers as calibration_numbers,
    embedding_explorer as embedding_explorer, robustness_explorer as robustness_explorer,
    standalone_page as standalone_page,
)
from .workshop import (
    BuildCheck as BuildCheck, BuildCheckFailed as BuildCheckFailed, Comparison as Comparison,
    check_build as check_build, participant_edition as participant_edition, same_array as same_array,
    same_arrays as same_arrays, same_values as same_values,
)

MODULES: tuple[str, ...]
__all__ = ["BANDWIDTH_SHARE", "BrowserAsset", "BuildCheck", "BuildCheckFailed", "CHAPTER_WORK", "COLAB_GPUS", "Check", "ClaimFailed", "Comparison", "Expectation", "FLOPS_SHARE", "FORECAST_MODELS", "ForecastModel", "GLUE_ROLE", "Gpu", "LENGTHS", "LOAD_BYTES_PER_SECOND", "OUTLINES_FILE", "PLAYGROUND_S", "Playground", "PlaygroundError", "REST_FULL_FACTOR", "STATE_COLOURS", "STEP_FLOOR_SECONDS", "Step", "TalkOutline", "Work", "attack_bounds", "attack_playground", "attack_style", "banner", "book_configuration", "browser_block", "calibration_explorer", "calibration_numbers", "chapter_timings", "chapter_titles", "check_build", "claim", "claims_report", "colab_forecast_table", "duration", "embedding_explorer", "estimate", "expect_generation", "fill", "glue", "gpu_table", "load_outlines", "notebook_edition", "notes_under_sentences", "outline_markdown", "participant_edition", "pending_notes", "remember", "report", "robustness_explorer", "run_checks", "same_array", "same_arrays", "same_values", "set_theme", "show_paragraph", "show_source", "show_tokens", "standalone_page", "state_colour", "step_seconds", "tokens_html"]
