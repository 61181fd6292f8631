"""The reference run: the paper's protocol at full size, generated once, committed, verifiable.

The chapters' live runs are small (they must build in minutes on a CPU); the
conclusions the book draws rest on this run instead. It has seven experiments,
each a set of *cells* (one method on one list of prompts), each cell a list of
batches:

* ``head_to_head``: 4 domains x 100 prompts x {ChainMark, KGW, SWEET,
  unwatermarked}, n = 200 new tokens, every watermarked text attacked by
  random substitution at delta = 0.1, 0.2, 0.3 and by the LM paraphrase;
* ``null``: the same 400 prompts sampled again without a watermark under two
  more seeds, so that with the head-to-head's own 400 unwatermarked texts the
  null holds 1,200 model texts, each scored by every detector;
* ``calibration``: ChainMark at S = 2, 3, 5, 8 (rho = 0.5) on 25 prompts per
  domain (the paper's state-count calibration design);
* ``kregular``: k = 1, 2, 3 successors per state (S = 5) on 100 wiki prompts;
* ``explorer``: S in {2, 3, 5, 8, 10} x rho in {0.1, 0.25, 0.5, 0.75, 1.0} on 16
  prompts, n = 128, with an unwatermarked baseline (for the static site);
* ``stealing``: the head-to-head's 400 prompts asked again of ChainMark under
  two new seeds, the replies a stealing adversary collects from the deployed model
  (with the head-to-head's and the calibration's replies of the same
  configuration, over 200,000 tokens; :mod:`cmlab.comparison.stealing`);
* ``context_keyed``: the same prompts under the stealing pool's seeds with the
  context-keyed variant (a state per pair of tokens), paired reply for reply
  with ChainMark's and attacked by the same adversary
  (:mod:`cmlab.comparison.context_keyed`, :mod:`cmlab.harness.context_keyed`).

Storage. A batch is written once it is complete, as one gzip-compressed JSON
lines file ``<experiment>/<cell>/b<batch>.jsonl.gz`` (temporary file, fsync,
rename: a file on disk is always whole), and a line is appended to the cell's
``provenance.jsonl`` (package version, git commit, device, dtype, threads,
seconds, tokens). A rerun skips the batches on disk, so an interrupted run
resumes where it stopped, on this machine or after a ``git pull`` on another.
Batch ``j`` of a cell is sampled with ``seed + j`` as one ``generate`` call,
exactly as :func:`cmlab.harness.runner.run_grid` does, and its records come from
the same code (:func:`cmlab.harness.runner.run_batch`).

The key. The run's key is derived with HKDF from the published label
:data:`REFERENCE_LABEL`: it is *not* secret, by design, so that anyone can
re-derive every state, check every score, and regenerate any batch
(:func:`verify`). Never watermark real text with it.

The modules, each importing only those before it: :mod:`.compare` (how a regenerated
batch is compared, field by field) and :mod:`.protocol` (the sizes, the key, the cells);
:mod:`.store` (folders, shard files, manifest, provenance); :mod:`.generation` (running
and resuming, status); :mod:`.verification` (regenerating stored batches); :mod:`.read`
(the frames, texts and explorer grid the chapters read).
"""
from __future__ import annotations

from chainmark.exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names, so that
#: reading the protocol (``cmlab reference --help``, the model-free CLI) never loads torch.
MODULES = ("compare", "protocol", "store", "generation", "verification", "read")
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)
