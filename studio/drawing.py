"""Draw placeholder portraits: Ember's stand-in returns them, the demo seeds reference photos.

A picture is a head-and-shoulders silhouette whose colours come from a seed, labelled with the
provider, the frame, the candidate number and a stamp, so every generated image is visibly
distinct and says where it came from.
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

RGB = tuple[int, int, int]

IMAGE_SIZE = 512
CLIP_SIZE = 256
CLIP_FRAMES = 5
CLIP_FRAME_MS = 160
SKIN_TONES: tuple[RGB, ...] = (
    (255, 224, 196),
    (241, 194, 160),
    (224, 172, 125),
    (198, 134, 86),
    (141, 85, 54),
    (94, 58, 38),
)


@dataclass(frozen=True)
class Picture:
    """Describe what to draw: one portrait, its colours and its labels."""

    seed: str  # drives the colours: Ember uses task id + candidate, so candidates differ
    provider: str
    frame: str
    candidate: str
    stamp: str  # e.g. the job id, so even two identical requests give distinct bytes


@lru_cache(maxsize=32)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Return Pillow's bundled font at a size (bitmap fallback without FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError):
        return ImageFont.load_default()


def printable(text: str, limit: int = 28) -> str:
    """Keep printable characters only, at most limit; odd client input must not break drawing."""
    return "".join(ch for ch in text if ch.isprintable())[:limit]


def _palette(seed: str) -> tuple[RGB, RGB, RGB, RGB]:
    """Derive background, clothes, skin and hair colours from a seed."""
    d = hashlib.sha256(seed.encode("utf-8")).digest()
    background = (60 + d[0] % 170, 60 + d[1] % 170, 60 + d[2] % 170)
    clothes = (d[3] % 140, d[4] % 140, d[5] % 140)
    skin = SKIN_TONES[d[6] % len(SKIN_TONES)]
    hair = (d[7] % 90, d[8] % 70, d[9] % 50)
    return background, clothes, skin, hair


def _draw_figure(draw: ImageDraw.ImageDraw, size: int, colours: tuple[RGB, ...], bob: int) -> None:
    """Draw a head-and-shoulders silhouette, shifted vertically by bob pixels."""
    _, clothes, skin, hair = colours

    def box(x0: float, y0: float, x1: float, y1: float) -> tuple[int, int, int, int]:
        return (int(x0 * size), int(y0 * size) + bob, int(x1 * size), int(y1 * size) + bob)

    draw.ellipse(box(0.12, 0.68, 0.88, 1.30), fill=clothes)
    draw.rectangle(box(0.44, 0.55, 0.56, 0.76), fill=skin)
    draw.ellipse(box(0.33, 0.24, 0.67, 0.62), fill=skin)
    draw.chord(box(0.32, 0.21, 0.68, 0.50), 180, 360, fill=hair)
    draw.ellipse(box(0.41, 0.41, 0.45, 0.45), fill=(30, 30, 30))
    draw.ellipse(box(0.55, 0.41, 0.59, 0.45), fill=(30, 30, 30))
    draw.arc(box(0.44, 0.47, 0.56, 0.55), 20, 160, fill=(120, 40, 40), width=max(1, size // 128))


def _draw_labels(image: Image.Image, size: int, picture: Picture) -> None:
    """Write provider, frame, #candidate and the job stamp, outlined so any colour reads."""
    pad = size // 32
    _put(image, (pad, pad), _label(printable(picture.provider), size // 14, 2, "la"))
    _put(image, (pad, pad + size // 11), _label(printable(picture.frame), size // 20, 2, "la"))
    _put(image, (size - pad, pad), _label(picture.candidate, size // 7, 3, "ra"))
    # The stamp differs for every job: drawn in place, never kept.
    ImageDraw.Draw(image).text(
        (pad, size - pad),
        picture.stamp,
        font=_font(max(8, size // 36)),
        anchor="ls",
        stroke_width=1,
        fill=(255, 255, 255),
        stroke_fill=(0, 0, 0),
    )


Label = tuple[tuple[int, int], Image.Image, Image.Image]


@lru_cache(maxsize=256)
def _label(text: str, font_size: int, stroke: int, anchor: str) -> Label:
    """Return a label's outline and letters as masks, and their corner from the anchor point.

    Outlined text (FreeType) was most of what a picture cost, and a label's masks depend
    only on its text, size, outline and anchor: each is drawn once and pasted after.
    """
    font = _font(font_size)
    measure = ImageDraw.Draw(Image.new("L", (1, 1)))
    box = measure.textbbox((0, 0), text, font=font, anchor=anchor, stroke_width=stroke)
    left, top = math.floor(box[0]), math.floor(box[1])
    right, bottom = math.ceil(box[2]), math.ceil(box[3])
    outline = Image.new("L", (max(1, right - left), max(1, bottom - top)))
    letters = outline.copy()
    at = (-left, -top)
    ImageDraw.Draw(outline).text(at, text, font=font, anchor=anchor, fill=255, stroke_width=stroke)
    ImageDraw.Draw(letters).text(at, text, font=font, anchor=anchor, fill=255)
    return (left, top), outline, letters


def _put(image: Image.Image, at: tuple[int, int], label: Label) -> None:
    """Paste a label's black outline, then its white letters, with its anchor at `at`."""
    (left, top), outline, letters = label
    corner = (at[0] + left, at[1] + top)
    image.paste((0, 0, 0), corner, outline)
    image.paste((255, 255, 255), corner, letters)


def _portrait(picture: Picture, size: int, bob: int = 0) -> Image.Image:
    """Draw one portrait frame."""
    colours = _palette(picture.seed)
    image = Image.new("RGB", (size, size), colours[0])
    _draw_figure(ImageDraw.Draw(image), size, colours, bob)
    _draw_labels(image, size, picture)
    return image


def render_png(picture: Picture, size: int = IMAGE_SIZE) -> bytes:
    """Render a still portrait as PNG bytes (fast compression: a few flat colours pack well)."""
    buffer = io.BytesIO()
    _portrait(picture, size).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def render_clip(picture: Picture, size: int = CLIP_SIZE, frames: int = CLIP_FRAMES) -> bytes:
    """Render a looping animated WebP of the portrait nodding."""
    images = []
    for index in range(frames):
        bob = int(size * 0.03 * math.sin(2 * math.pi * index / frames))
        image = _portrait(picture, size, bob)
        # A progress bar makes every frame distinct, so the encoder cannot merge frames.
        ImageDraw.Draw(image).rectangle(
            (0, size - 4, (index + 1) * size // frames, size), fill=(255, 255, 255)
        )
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="WEBP",
        save_all=True,
        append_images=images[1:],
        duration=CLIP_FRAME_MS,
        loop=0,
        quality=80,
    )
    return buffer.getvalue()
