"""Plotly figures as one self-contained HTML page, readable without a network.

Training clusters are often air-gapped, and plotly's default HTML (and ``mlflow.log_figure``)
loads plotly.js from a CDN: offline, the page stays blank. Every HTML file the tool writes
comes from :func:`html_page`, which embeds plotly.js once (about 4.8 MB with plotly 7).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

__all__ = ["html_page"]


def html_page(title: str, figures: Sequence[Any], notes: Sequence[str] = ()) -> str:
    """One HTML document holding ``figures`` (plotly), with plotly.js inline.

    Args:
        title: the page's title.
        figures: plotly figures, shown one below the other.
        notes: lines of text shown above the figures, one paragraph each.
    """
    parts = [
        figure.to_html(full_html=False, include_plotlyjs=(i == 0))
        for i, figure in enumerate(figures)
    ]
    paragraphs = [f"<p style='font-family:sans-serif'>{html.escape(n)}</p>" for n in notes]
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>\n"
        + "\n".join([*paragraphs, *parts])
        + "\n</body></html>\n"
    )
