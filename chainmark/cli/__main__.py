"""``python -m chainmark.cli``: the same as the ``chainmark`` command."""
from . import main

__all__: list[str] = []

raise SystemExit(main())
