"""Build the mixed documents that the segment finder is measured on, and write them into the package.

The documents are token ids of the embedded model's tokenizer: the prose of
the Python Language Reference and the reference run's unwatermarked replies,
with slices of the reference run's ChainMark replies pasted in at known
positions (see :mod:`cmlab.harness.mixed`). The human prose follows the
Python version that ships it, so the data set is built once and committed::

    python tools/build_mixed_documents.py            # writes book/cmlab/data/mixed/documents.jsonl.gz
    python tools/build_mixed_documents.py --check    # exit 1 if a rebuild here would differ
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from cmlab.harness.mixed import MIXED_FILE, build_mixed_documents, load_mixed_documents, write_mixed_documents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=MIXED_FILE, help="where to write (default: the package's file)")
    parser.add_argument("--seed", type=int, default=2026, help="the seed of every random choice (default 2026)")
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary file and compare")
    args = parser.parse_args(argv)
    docs = build_mixed_documents(seed=args.seed)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write_mixed_documents(docs, Path(tmp) / "documents.jsonl.gz")
            same = fresh.read_bytes() == args.out.read_bytes()
        print("identical" if same else f"a rebuild here differs from {args.out} (another Python version?)")
        return 0 if same else 1
    path = write_mixed_documents(docs, args.out)
    back = load_mixed_documents(path)
    designs = sorted({d.design for d in back})
    print(f"{len(back)} documents, {sum(d.n_tokens for d in back):,} tokens, {len(designs)} designs "
          f"-> {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
