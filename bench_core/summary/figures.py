"""How a chart is shown: a PNG at 2x (sharp on high-dpi screens; the report embeds it) and, where someone may
look at the notebook itself, an SVG (JupyterLab draws it in a trusted notebook), each cut to the chart's own box,
with its text alternative.
"""
from __future__ import annotations

import io
import re

DISPLAY_DPI = 90             # CSS pixels per inch of a chart as shown
PIXEL_RATIO = 2              # charts are rendered at 2x for sharp text on high-dpi screens
PNG_COMPRESS_LEVEL = 3       # zlib level of a chart's PNG (see png_bytes)
# JupyterLab shows a chart's SVG (a trusted notebook prefers it to the PNG) at the size the SVG states, not
# shrunk to its output area (its style confines a PNG, not an SVG drawn as an image): an 11-inch chart is
# 1,056 px there, past a 968 px output area. So the SVG states at most this width (its drawing scaled to it,
# viewBox kept): the output area of a notebook in a 1,280 px window with JupyterLab's file browser open
# (tests/test_lab.py's OUTPUT_AREA_PX). The report shows the PNG, max-width 100 % of its page.
SVG_MAX_PX = 800
# Whether a chart is also shown as an SVG (vector_charts): yes in a notebook run by hand, where JupyterLab shows it;
# `bench report` turns it off (its page embeds the PNG, and the executed notebook it leaves is not trusted, so
# JupyterLab shows the PNG there too) unless asked (--svg): the SVG was a quarter of a chart's CPU.
_SVG = [True]


def vector_charts(on: bool = True) -> None:
    """Whether the charts shown from now on carry an SVG beside their PNG (the summary notebook's `svg`)."""
    _SVG[0] = bool(on)


def show_figure(fig, alt: str) -> None:
    """Show a chart as a PNG at 2x (sharp text on high-dpi screens) and, unless vector_charts(False), as an SVG,
    with `alt` as its text.

    The report embeds the PNG (report.py prefers it); JupyterLab shows the SVG, or the PNG in a
    notebook that is not trusted (an image output always shows; HTML may be sanitized)."""
    import base64

    import matplotlib.pyplot as plt
    from IPython.display import display
    png_box, svg_box = tight_boxes(fig, DISPLAY_DPI * PIXEL_RATIO, svg=_SVG[0])
    png = png_bytes(fig, png_box, DISPLAY_DPI * PIXEL_RATIO)
    shown = {"image/png": base64.b64encode(png).decode(), "text/plain": alt}
    if svg_box is not None:
        svg = io.StringIO()
        fig.savefig(svg, format="svg", bbox_inches=svg_box, facecolor="white")
        shown["image/svg+xml"] = fit_svg(svg.getvalue())
    plt.close(fig)
    width_px = int.from_bytes(png[16:20], "big") // PIXEL_RATIO  # the PNG IHDR chunk holds the width
    display(shown, metadata={"image/png": {"width": width_px}}, raw=True)


def fit_svg(svg: str, max_px: float = SVG_MAX_PX) -> str:
    """An SVG whose stated size (width and height in pt, as matplotlib writes them) is at most `max_px` CSS
    pixels wide, its drawing scaled with it (the viewBox stays): JupyterLab draws it at that size."""
    head = re.search(r'<svg\b[^>]*?\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"', svg)
    if not head:
        return svg
    width_px, height_px = float(head.group(1)) * 4 / 3, float(head.group(2)) * 4 / 3
    if width_px <= max_px:
        return svg
    scale = max_px / width_px
    sized = head.group(0).replace(f'width="{head.group(1)}pt"', f'width="{max_px:.2f}px"', 1).replace(
        f'height="{head.group(2)}pt"', f'height="{height_px * scale:.2f}px"', 1)
    return svg[:head.start()] + sized + svg[head.end():]


def png_bytes(fig, box, dpi: float) -> bytes:
    """The area `box` of `fig` at `dpi` as an RGB PNG: savefig's pixels, without the alpha channel of its
    RGBA PNG, which says nothing on a white face (every pixel is opaque). Encoding took a third of the
    CPU of saving a chart; without that channel, at zlib level 3 (PNG_COMPRESS_LEVEL), it takes about
    half as much, and the PNG is no larger than matplotlib's at level 6."""
    from matplotlib.transforms import Affine2D, Bbox, TransformedBbox
    from PIL import Image
    raw = io.BytesIO()
    fig.savefig(raw, format="rgba", dpi=dpi, bbox_inches=box, facecolor="white")
    # The size that savefig draws: the box scaled to pixels as its print does it (matplotlib's adjust_bbox).
    width, height = (int(v) for v in TransformedBbox(Bbox.from_bounds(0, 0, *box.size), Affine2D().scale(dpi)).size)
    png = io.BytesIO()
    if len(raw.getbuffer()) == width * height * 4:
        image = Image.frombuffer("RGBA", (width, height), raw.getbuffer(), "raw", "RGBA", 0, 1).convert("RGB")
        image.save(png, format="png", dpi=(dpi, dpi), compress_level=PNG_COMPRESS_LEVEL)
    else:  # not the size expected: matplotlib's own PNG
        fig.savefig(png, format="png", dpi=dpi, bbox_inches=box, facecolor="white")
    return png.getvalue()


def tight_boxes(fig, png_dpi: float, svg: bool = True) -> tuple:
    """The areas that savefig(bbox_inches="tight") saves of `fig` as a PNG at png_dpi and as an SVG (None
    without `svg`).

    savefig measures its box anew for each file, after a draw that renders nothing (to place what is
    placed at draw time), and makes that draw whenever the figure has a layout engine, even with a box
    given: tight_layout leaves a placeholder one. Each box here is measured with its own format's text
    metrics (an SVG box from the PNG's would be up to 3 pt off), without that draw: get_tightbbox places
    ticks, titles, axis labels and legends itself (the same boxes to the last digit on every chart of
    the report tests). Saved with its box and no engine, each file is drawn once."""
    import matplotlib
    from matplotlib.backends.backend_svg import RendererSVG
    pad = matplotlib.rcParams["savefig.pad_inches"]
    shown_dpi = fig.dpi
    try:
        fig.dpi = png_dpi
        png_box = fig.get_tightbbox().padded(pad)
        svg_box = None
        if svg:
            fig.dpi = 72  # an SVG is drawn in points
            width, height = fig.get_size_inches() * 72
            svg_box = fig.get_tightbbox(RendererSVG(width, height, io.StringIO())).padded(pad)
    finally:
        fig.dpi = shown_dpi
    fig.set_layout_engine(None)
    return png_box, svg_box
