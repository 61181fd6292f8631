"""``python -m cmlab``: the lab's command line (:mod:`cmlab.cli`)."""
import sys

from .cli import main

sys.exit(main())
