from chainmark.detect import detect
from chainmark.viz import source_html, state_colour, tokens_html


def test_source_html_shows_the_real_source():
    html = source_html(detect)
    assert "chainmark.detect.detect" in html
    assert "def" in html and "distinct_pairs" in html


def test_tokens_html_escapes_and_marks_gated_tokens():
    html = tokens_html(["<b>", " x", "\n"], states=[0, 1, 2], gated=[False, True, False], legend_S=3)
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert html.count("(gated)") == 1
    assert "↵" in html
    assert state_colour(1) in html and "s2" in html


def test_state_colours_cycle():
    assert state_colour(0) == state_colour(12)
