"""An image made fit for every provider: its pixel size known, scaled to ``image_max_side``, in a format they take.

JPEG, PNG, WebP and still GIF are what OpenAI, Anthropic and the OpenAI-compatible routes all
accept; an image already in one of them, small enough and upright is kept byte for byte (its
hash then matches what the platform sent). Anything else is re-encoded: scaled with its aspect
kept, turned upright by its EXIF orientation (a phone's photo), an animated GIF's first frame as
PNG, other formats (BMP, TIFF, ...) as PNG when they have transparency, JPEG otherwise.

Decoding a 12-megapixel photo takes a core for a good part of a second, so Pillow runs in a
thread (:func:`asyncio.to_thread`) and the event loop keeps serving other chats. A small file can
hold a huge image (a compressed PNG of 170 megapixels fits in under a megabyte and decodes to
hundreds), so an image over :data:`MAX_PIXELS` is refused before it is decoded, far below Pillow's
own decompression-bomb guard. The stored bytes stay under :data:`MAX_STORED_BYTES` (Anthropic
refuses an image over 5 MB of base64): a larger result is re-encoded as JPEG, smaller each time.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from gateway.media.errors import MediaError

#: Formats every provider accepts, as Pillow names them, and their mime types.
KEPT_FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
#: EXIF's orientation tag (1: upright).
_ORIENTATION = 0x0112
_JPEG_QUALITY = 85
#: The most pixels decoded for one image (a 48-megapixel phone photo fits).
MAX_PIXELS = 50_000_000
#: The most bytes an image is stored (and sent) as: 5 MB of base64 is the strictest provider's limit.
MAX_STORED_BYTES = 3_700_000


@dataclass(frozen=True)
class Picture:
    """The bytes to store and what they are: the mime and the pixel size of exactly these bytes."""

    data: bytes
    mime: str
    width: int
    height: int


async def prepare_image(data: bytes, *, max_side: int) -> Picture:
    """``data`` as a :class:`Picture` no side of which is over ``max_side``; raises :class:`MediaError`
    ("corrupt image: ...") for bytes that are not an image Pillow can read."""
    return await asyncio.to_thread(prepare_image_now, data, max_side)


def prepare_image_now(data: bytes, max_side: int) -> Picture:
    """:func:`prepare_image` on this thread (for callers already off the event loop)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_PIXELS:
                raise MediaError(f"the image has too many pixels to read safely ({image.width}×{image.height})")
            picture = _prepared(image, data, max_side)
            return picture if len(picture.data) <= MAX_STORED_BYTES else _smaller(image, picture)
    except Image.DecompressionBombError as error:
        raise MediaError(f"the image has too many pixels to read safely ({error})") from error
    except MediaError:
        raise
    except Exception as error:
        raise MediaError(f"corrupt image: {_reason(error)}") from error


def _smaller(image: Image.Image, picture: Picture) -> Picture:
    """``picture`` re-encoded as JPEG, scaled down until its bytes fit :data:`MAX_STORED_BYTES`."""
    image.seek(0)
    frame = ImageOps.exif_transpose(image.convert("RGB"))
    side = max(picture.width, picture.height)
    while True:
        frame.thumbnail((side, side), Image.Resampling.LANCZOS)
        data = _encoded(frame, "JPEG")
        if len(data) <= MAX_STORED_BYTES or side <= 256:
            return Picture(data, KEPT_FORMATS["JPEG"], frame.width, frame.height)
        side = int(side * 0.75)


def _prepared(image: Image.Image, data: bytes, max_side: int) -> Picture:
    fmt = image.format or ""
    orientation = image.getexif().get(_ORIENTATION, 1)
    animated = bool(getattr(image, "is_animated", False))
    width, height = image.size
    if fmt in KEPT_FORMATS and not animated and orientation == 1 and max(width, height) <= max_side:
        image.load()  # a truncated file fails here, not at the provider
        return Picture(data, KEPT_FORMATS[fmt], width, height)
    if fmt == "JPEG":
        # decode at a reduced scale straight away (DCT scaling, never below the size wanted): far less work
        image.draft(image.mode, _fitted(image.size, max_side))
    image.seek(0)
    frame = ImageOps.exif_transpose(image.convert("RGBA") if image.mode == "P" else image)
    frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out_format = fmt if fmt in KEPT_FORMATS and not animated else _fallback(frame)
    if out_format == "GIF" and animated:
        out_format = "PNG"
    return Picture(_encoded(frame, out_format), KEPT_FORMATS[out_format], frame.width, frame.height)


def _fitted(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    width, height = size
    scale = min(1.0, max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _fallback(frame: Image.Image) -> str:
    """PNG keeps transparency and lines; a photo without transparency is far smaller as JPEG."""
    return "PNG" if "A" in frame.getbands() or frame.mode in ("1", "P") else "JPEG"


def _encoded(frame: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    if fmt == "JPEG":
        if frame.mode not in ("RGB", "L"):
            frame = frame.convert("RGB")
        frame.save(out, "JPEG", quality=_JPEG_QUALITY, optimize=True)
    elif fmt == "WEBP":
        frame.save(out, "WEBP", quality=_JPEG_QUALITY)
    elif fmt == "GIF":
        frame.save(out, "GIF")
    else:
        if frame.mode not in ("RGB", "RGBA", "L", "LA", "1", "P", "I;16"):
            frame = frame.convert("RGBA")
        frame.save(out, "PNG")
    return out.getvalue()


def _reason(error: BaseException) -> str:
    if isinstance(error, UnidentifiedImageError):
        return "not an image format that can be read"
    text = str(error).strip()
    return text[:200] if text else type(error).__name__
