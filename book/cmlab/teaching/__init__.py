"""The book's own machinery: claims that guard sentences, plots, widgets, the playground,
time forecasts (on this machine, and on Colab's GPUs), talk outlines, the workshop doctor and the participant edition's checks.
"""
from __future__ import annotations

from chainmark.exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("claims", "plots", "widgets", "playground", "forecast", "colab", "talks", "doctor", "workshop",)
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)
