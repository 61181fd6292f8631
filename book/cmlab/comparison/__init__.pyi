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
from .adversary import (
    blind_substitution as blind_substitution,
    keyed_forge as keyed_forge,
    keyed_scrub as keyed_scrub,
    predicted_z_ratio as predicted_z_ratio,
    random_walk_text as random_walk_text,
    simulate_walks as simulate_walks,
)
from .anytime_peer import (
    PEER_CAP as PEER_CAP,
    PEER_COMPONENTS as PEER_COMPONENTS,
    PEER_ENDPOINT_WEIGHT as PEER_ENDPOINT_WEIGHT,
    peer_bets as peer_bets,
    peer_crossing as peer_crossing,
    peer_log_e as peer_log_e,
)
from .attacks import (
    ATTACK_SEED as ATTACK_SEED,
    Attack as Attack,
    Deletion as Deletion,
    Insertion as Insertion,
    RECORD_SEEDING as RECORD_SEEDING,
    SeedLike as SeedLike,
    Substitution as Substitution,
    TextAttack as TextAttack,
    check_delta as check_delta,
    check_vocab_size as check_vocab_size,
    edit_fraction as edit_fraction,
    n_edits as n_edits,
)
from .baselines import (
    BaselineResult as BaselineResult,
    KGWConfig as KGWConfig,
    KGWLogitsProcessor as KGWLogitsProcessor,
    SweetConfig as SweetConfig,
    green_mask as green_mask,
    green_z as green_z,
    kgw_detect as kgw_detect,
    kgw_hashing_key as kgw_hashing_key,
    sweet_detect as sweet_detect,
    sweet_detect_batch as sweet_detect_batch,
    tail_p_values as tail_p_values,
    text_entropies as text_entropies,
    transformers_p_value as transformers_p_value,
)
from .context_keyed import (
    CONTEXT_INFO as CONTEXT_INFO,
    ContextKeyedLogitsProcessor as ContextKeyedLogitsProcessor,
    ReplayProcessor as ReplayProcessor,
    StolenPairMap as StolenPairMap,
    StolenPairProcessor as StolenPairProcessor,
    context_config as context_config,
    context_detect as context_detect,
    context_states as context_states,
    forge_pairs as forge_pairs,
    legal_share as legal_share,
    pair_codes as pair_codes,
    replay_edit as replay_edit,
    replay_table as replay_table,
    steal_pairs as steal_pairs,
    survival as survival,
)
from .fpr_recipes import (
    PAPER_FPR_RECIPES as PAPER_FPR_RECIPES,
    RECIPES as RECIPES,
    RECIPE_NOTES as RECIPE_NOTES,
    RecipeFit as RecipeFit,
    RecipeFitArgs as RecipeFitArgs,
    RecipeResult as RecipeResult,
    fpr_recipes as fpr_recipes,
    hac_z as hac_z,
    iid_z as iid_z,
    k_skip_z as k_skip_z,
    weighted_z as weighted_z,
)
from .lrdetect import (
    LikelihoodRatioResult as LikelihoodRatioResult,
    SimulatedNull as SimulatedNull,
    SimulatedNullArgs as SimulatedNullArgs,
    gate_probabilities as gate_probabilities,
    llr_weights as llr_weights,
    lr_detect as lr_detect,
    simulate_llr_null as simulate_llr_null,
    teacher_forced_signal as teacher_forced_signal,
)
from .model_check import (
    ModelCheck as ModelCheck,
    VERIFIED_SHARE as VERIFIED_SHARE,
    model_check as model_check,
)
from .quality import (
    KLCost as KLCost,
    TokenScores as TokenScores,
    kl_bound as kl_bound,
    kl_cost as kl_cost,
    repeated_ngram_share as repeated_ngram_share,
    score_generations as score_generations,
    score_tokens as score_tokens,
    self_perplexity as self_perplexity,
)
from .rewrites import (
    BackTranslation as BackTranslation,
    LMTranslator as LMTranslator,
    Paraphrase as Paraphrase,
    Seq2SeqTranslator as Seq2SeqTranslator,
    make_attack as make_attack,
    translator_or_fallback as translator_or_fallback,
)
from .segments_peer import (
    cover_segments as cover_segments,
)
from .stealing import (
    BigramEvidence as BigramEvidence,
    StolenMap as StolenMap,
    StolenMapProcessor as StolenMapProcessor,
    apply_path as apply_path,
    bigram_evidence as bigram_evidence,
    edits_to_flip as edits_to_flip,
    forge_path as forge_path,
    scrub_path as scrub_path,
    steal as steal,
)

MODULES: tuple[str, ...]
__all__ = ["ATTACK_SEED", "Attack", "BackTranslation", "BaselineResult", "BigramEvidence", "CONTEXT_INFO", "ContextKeyedLogitsProcessor", "Deletion", "Insertion", "KGWConfig", "KGWLogitsProcessor", "KLCost", "LMTranslator", "LikelihoodRatioResult", "ModelCheck", "PAPER_FPR_RECIPES", "PEER_CAP", "PEER_COMPONENTS", "PEER_ENDPOINT_WEIGHT", "Paraphrase", "RECIPES", "RECIPE_NOTES", "RECORD_SEEDING", "RecipeFit", "RecipeFitArgs", "RecipeResult", "ReplayProcessor", "SeedLike", "Seq2SeqTranslator", "SimulatedNull", "SimulatedNullArgs", "StolenMap", "StolenMapProcessor", "StolenPairMap", "StolenPairProcessor", "Substitution", "SweetConfig", "TextAttack", "TokenScores", "VERIFIED_SHARE", "apply_path", "bigram_evidence", "blind_substitution", "check_delta", "check_vocab_size", "context_config", "context_detect", "context_states", "cover_segments", "edit_fraction", "edits_to_flip", "forge_pairs", "forge_path", "fpr_recipes", "gate_probabilities", "green_mask", "green_z", "hac_z", "iid_z", "k_skip_z", "keyed_forge", "keyed_scrub", "kgw_detect", "kgw_hashing_key", "kl_bound", "kl_cost", "legal_share", "llr_weights", "lr_detect", "make_attack", "model_check", "n_edits", "pair_codes", "peer_bets", "peer_crossing", "peer_log_e", "predicted_z_ratio", "random_walk_text", "repeated_ngram_share", "replay_edit", "replay_table", "score_generations", "score_tokens", "scrub_path", "self_perplexity", "simulate_llr_null", "simulate_walks", "steal", "steal_pairs", "survival", "sweet_detect", "sweet_detect_batch", "tail_p_values", "teacher_forced_signal", "text_entropies", "transformers_p_value", "translator_or_fallback", "weighted_z"]
