import pytest

from chainmark.detection import detect
from cmlab.teaching.plots import _source_html, state_colour, tokens_html


def test_source_html_shows_the_real_source():
    html = _source_html(detect)
    assert "chainmark.detection.detect" in html
    assert "def" in html and "vocab_size" in html


def test_tokens_html_escapes_and_marks_gated_tokens():
    html = tokens_html(["<b>", " x", "\n"], states=[0, 1, 2], gated=[False, True, False], legend_S=3)
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert html.count("(gated)") == 1
    assert "↵" in html
    assert state_colour(1) in html and "s2" in html


def test_state_colours_cycle():
    assert state_colour(0) == state_colour(12)


# Machado, Oliveira & Fernandes (2009): full-severity colour-vision-deficiency simulation, linear RGB.
_CVD = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}
#: CIE76 colour difference below which two flat colours are hard to tell apart at a glance.
MIN_DELTA_E = 10.0


def _lab_seen(hex_colour: str, deficiency: str | None):
    import numpy as np

    srgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    if deficiency:
        linear = np.clip(np.array(_CVD[deficiency]) @ linear, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_the_state_palette_survives_simulated_colour_blindness():
    """The book's S = 5 states and the legal-step colour stay apart for normal vision and under
    simulated protanopia, deuteranopia and tritanopia (the old red/orange/yellow/green/blue palette
    gave s0 ~ s3 at Delta E 3.6 under deuteranopia)."""
    import itertools

    import numpy as np

    from cmlab.teaching.plots import _LEGAL_STEP_COLOUR, STATE_COLOURS

    colours = [*STATE_COLOURS[:5], _LEGAL_STEP_COLOUR]
    assert _LEGAL_STEP_COLOUR not in STATE_COLOURS
    for deficiency in (None, "protanopia", "deuteranopia", "tritanopia"):
        seen = [_lab_seen(c, deficiency) for c in colours]
        worst = min(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(seen, 2))
        assert worst >= MIN_DELTA_E, (deficiency, worst)


def test_every_tile_prints_its_state_digit():
    html = tokens_html(["a", "b", "c"], states=[0, 4, 2], gated=[False, True, False])
    for digit in "042":
        assert f">{digit}</sub>" in html


def test_every_attack_has_its_own_colour_and_marker_across_the_book():
    from cmlab.teaching.plots import _ATTACK_STYLE, STATE_COLOURS, attack_style

    colours = [c for c, _ in _ATTACK_STYLE.values()]
    markers = [m for _, m in _ATTACK_STYLE.values()]
    assert len(set(colours)) == len(colours) and len(set(markers)) == len(markers)
    assert attack_style("back-translation (fr)") == _ATTACK_STYLE["back-translation"]
    with pytest.raises(ValueError, match="no style"):
        attack_style("rot13")


def test_a_series_shows_as_a_table_without_a_dtype_footer():
    import pandas as pd

    from cmlab.teaching.plots import _series_html

    shown = _series_html(pd.Series({"S": 5, "key": "teaching"}, dtype=object, name="value"))
    assert "<table" in shown and "teaching" in shown and "value" in shown and "dtype" not in shown


def test_a_token_panel_carries_its_own_title_escaped():
    html = tokens_html(["a"], states=[0], title="S = 5 <key b>")
    assert html.index("S = 5 &lt;key b&gt;") < html.index(">a<sub")
