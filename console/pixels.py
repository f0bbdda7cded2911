"""A screenshot in the terminal: two pixels per cell, the upper-half block in the top pixel's colour on the
bottom pixel's (works in every true-colour terminal; no image protocol needed)."""

from __future__ import annotations

import io
from typing import Any

from rich.style import Style
from rich.text import Text

HALF = "▀"


def render(data: bytes, width: int, max_rows: int = 40) -> Text:
    """The image scaled to `width` cells (and at most `max_rows` rows), aspect kept; a text on failure."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data)).convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        return Text(f"(unreadable image: {exc})", style="red")
    width = max(4, width)
    height = max(2, round(image.height * width / image.width))  # 2 pixels per cell, cells ~1:2
    if height > max_rows * 2:
        width = max(4, round(width * max_rows * 2 / height))
        height = max_rows * 2
    height += height % 2
    small = image.resize((width, height), Image.Resampling.BILINEAR)
    pixels = small.load()
    assert pixels is not None
    out = Text()
    for y in range(0, height, 2):
        for x in range(width):
            top = pixels[x, y]
            bottom = pixels[x, y + 1]
            out.append(HALF, Style(color=_hex(top), bgcolor=_hex(bottom)))
        if y + 2 < height:
            out.append("\n")
    return out


def _hex(rgb: Any) -> str:
    r, g, b = (int(c) for c in rgb)
    return f"#{r:02x}{g:02x}{b:02x}"
