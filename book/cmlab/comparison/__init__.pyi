"""Static names of ``cmlab.comparison`` for editors and type checkers; the runtime loads them lazily.

Written by ``tools/write_stubs.py`` from the modules' ``__all__``: do not edit."""
from __future__ import annotations

from . import adversary as adversary
from . import anytime_peer as anytime_peer
from . import attacks as attacks
from . import baselines as baselines
from . import context_keyed as context_keyed
from . import lrdetect as lrdetect
from . import quality as quality
from . import rewrites as rewrites
from . import segments_peer as segments_peer
from . import stealing as stealing
from . import transit as transit
from .adversary import (
    blind_substitution as blind_substitution, keyed_forge as keyed_forge, keyed_scrub as keyed_scrub,
    predicted_z_ratio as predicted_z_ratio, random_walk_text as random_walk_text, simulate_walks as simulate_walks,
)
from .anytime_peer import (
    peer_crossing as peer_crossing,
)
from .attacks import (
    ATTACK_SEED as ATTACK_SEED, Attack as Attack, Deletion as Deletion, Insertion as Insertion,
    RECORD_SEEDING as RECORD_SEEDING, SeedLike as SeedLike, Substitution as Substitution, TextAttack as TextAttack,
    check_delta as check_delta, check_vocab_size as check_vocab_size, edit_fraction as edit_fraction,
    n_edits as n_edits,
)
from .baselines import (
    BaselineResult as BaselineResult, KGWConfig as KGWConfig, KGWLogitsProcessor as KGWLogitsProcessor,
    SweetConfig as SweetConfig, kgw_detect as kgw_detect, sweet_detect_batch as sweet_detect_batch,
    tail_p_values as tail_p_values, text_entropies as text_entropies, transformers_p_value as transformers_p_value,
)
from .context_keyed import (
    ContextKeyedLogitsProcessor as ContextKeyedLogitsProcessor, ReplayProcessor as ReplayProcessor,
    StolenPairMap as StolenPairMap, StolenPairProcessor as StolenPairProcessor, context_config as context_config,
    context_detect as context_detect, forge_pairs as forge_pairs, legal_share as legal_share,
    pair_codes as pair_codes, replay_edit as replay_edit, replay_table as replay_table, steal_pairs as steal_pairs,
    survival as survival,
)
from .fpr_recipes import (
    PAPER_FPR_RECIPES as PAPER_FPR_RECIPES, RECIPE_NOTES as RECIPE_NOTES, RecipeFit as RecipeFit,
    RecipeResult as RecipeResult, fpr_recipes as fpr_recipes,
)
from .lrdetect import (
    LikelihoodRatioResult as LikelihoodRatioResult, SimulatedNull as SimulatedNull,
    gate_probabilities as gate_probabilities, lr_detect as lr_detect,
    teacher_forced_signal as teacher_forced_signal,
)
from .model_check import (
    ModelCheck as ModelCheck, VERIFIED_SHARE as VERIFIED_SHARE, model_check as model_check,
)
from .quality import (
    FORCED_TOKENS_FILE as FORCED_TOKENS_FILE, KLCost as KLCost, TokenScores as TokenScores, kl_bound as kl_bound,
    kl_cost as kl_cost, load_forced_tokens as load_forced_tokens, repeated_ngram_share as repeated_ngram_share,
    score_generations as score_generations, score_tokens as score_tokens, self_perplexity as self_perplexity,
    surprise_by_gate as surprise_by_gate,
)
from .rewrites import (
    BackTranslation as BackTranslation, LMTranslator as LMTranslator, Paraphrase as Paraphrase,
    Seq2SeqTranslator as Seq2SeqTranslator, make_attack as make_attack,
    translator_or_fallback as translator_or_fallback,
)
from .segments_peer import (
    cover_segments as cover_segments,
)
from .stealing import (
    BigramEvidence as BigramEvidence, StolenMap as StolenMap, StolenMapProcessor as StolenMapProcessor,
    apply_path as apply_path, bigram_evidence as bigram_evidence, edits_to_flip as edits_to_flip,
    forge_path as forge_path, scrub_path as scrub_path, steal as steal,
)
from .transit import (
    transit_table as transit_table,
)

MODULES: tuple[str, ...]
__all__ = ["ATTACK_SEED", "Attack", "BackTranslation", "BaselineResult", "BigramEvidence", "ContextKeyedLogitsProcessor", "Deletion", "FORCED_TOKENS_FILE", "Insertion", "KGWConfig", "KGWLogitsProcessor", "KLCost", "LMTranslator", "LikelihoodRatioResult", "ModelCheck", "PAPER_FPR_RECIPES", "Paraphrase", "RECIPE_NOTES", "RECORD_SEEDING", "RecipeFit", "RecipeResult", "ReplayProcessor", "SeedLike", "Seq2SeqTranslator", "SimulatedNull", "StolenMap", "StolenMapProcessor", "StolenPairMap", "StolenPairProcessor", "Substitution", "SweetConfig", "TextAttack", "TokenScores", "VERIFIED_SHARE", "apply_path", "bigram_evidence", "blind_substitution", "check_delta", "check_vocab_size", "context_config", "context_detect", "cover_segments", "edit_fraction", "edits_to_flip", "forge_pairs", "forge_path", "fpr_recipes", "gate_probabilities", "keyed_forge", "keyed_scrub", "kgw_detect", "kl_bound", "kl_cost", "legal_share", "load_forced_tokens", "lr_detect", "make_attack", "model_check", "n_edits", "pair_codes", "peer_crossing", "predicted_z_ratio", "random_walk_text", "repeated_ngram_share", "replay_edit", "replay_table", "score_generations", "score_tokens", "scrub_path", "self_perplexity", "simulate_walks", "steal", "steal_pairs", "surprise_by_gate", "survival", "sweet_detect_batch", "tail_p_values", "teacher_forced_signal", "text_entropies", "transformers_p_value", "transit_table", "translator_or_fallback"]
