"""The book's own machinery: claims that guard sentences, plots, widgets, the playground,
time forecasts (on this machine, and on Colab's GPUs), talk outlines, the workshop doctor,
the participant edition's checks and the notebook edition's paragraphs.
"""
from __future__ import annotations

from chainmark.exports import lazy_exports

#: The modules whose ``__all__`` this package exports, each imported on first use of one of its names.
MODULES = ("claims", "plots", "widgets", "playground", "forecast", "colab", "talks", "doctor", "workshop", "edition",)
__getattr__, __dir__ = lazy_exports(__name__, __file__, MODULES)
