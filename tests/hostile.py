"""Hostile image files built byte by byte: small on disk, enormous to decode."""

import io
import struct
import zlib

from PIL import Image

from studio.chunks import GIF_SCREEN, gif_colour_table_size


def many_frame_gif(width: int = 6000, height: int = 6000, frames: int = 1000) -> bytes:
    """Return a GIF of `frames` one-pixel frames on a `width` x `height` canvas (~23 KB).

    Every frame decodes onto the whole canvas: 1,000 frames of 6000 x 6000 would be 36
    billion pixels to decode from a file a few kilobytes long.
    """
    out = io.BytesIO()
    out.write(b"GIF89a")
    out.write(struct.pack("<HHBBB", width, height, 0x80, 0, 0))  # a 2-colour global table
    out.write(b"\x00\x00\x00\xff\xff\xff")
    for index in range(frames):
        out.write(b"\x21\xf9\x04\x08\x01\x00\x00\x00")  # graphic control: 1/100 s, dispose
        out.write(b"\x2c" + struct.pack("<HHHHB", index % width, 0, 1, 1, 0))
        out.write(b"\x02\x02\x4c\x01\x00")  # LZW minimum code size 2, one pixel, end
    out.write(b"\x3b")
    return out.getvalue()


def animated(fmt: str, frames: int, size: tuple[int, int] = (8, 8)) -> bytes:
    """Return a real animation (APNG, animated WebP or GIF) with distinct frames."""
    images = [
        Image.new("RGB", size, (index % 256, (index * 7) % 256, 99)) for index in range(frames)
    ]
    out = io.BytesIO()
    images[0].save(out, fmt, save_all=True, append_images=images[1:], duration=40, loop=0)
    return out.getvalue()


def _jpeg(img: Image.Image, **kwargs: object) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", **kwargs)
    return out.getvalue()


def _segments(data: bytes) -> list[tuple[int, bytes]]:
    """Split a JPEG into (marker, bytes) parts; a scan's part runs to the next marker."""
    parts: list[tuple[int, bytes]] = []
    pos = 2
    while pos < len(data):
        marker = data[pos + 1]
        if marker == 0xD9:
            parts.append((marker, data[pos : pos + 2]))
            break
        (length,) = struct.unpack_from(">H", data, pos + 2)
        end = pos + 2 + length
        if marker == 0xDA:  # compressed data follows, up to a marker not 0x00 or RSTn
            while not (data[end] == 0xFF and data[end + 1] not in (0x00, *range(0xD0, 0xD8))):
                end += 1
        parts.append((marker, data[pos:end]))
        pos = end
    return parts


def repeated_scans(width: int = 2000, height: int = 2000, repeat: int = 50) -> bytes:
    """Return a progressive JPEG whose small refinement scans come `repeat` times more.

    Each scan is a pass over the whole image: a few hundred KB of repeats cost a core
    for minutes at 6000 x 6000 (36 million pixels a pass).
    """
    data = _jpeg(Image.new("L", (width, height), 128), progressive=True, quality=90)
    parts = _segments(data)
    scans = [part for marker, part in parts if marker == 0xDA]
    extra = b"".join(scan for scan in scans[1:] if len(scan) < 100) * repeat
    head = b"".join(part for marker, part in parts if marker != 0xD9)
    return b"\xff\xd8" + head + extra + b"\xff\xd9"


def padded_jpeg(padding: int = 1024 * 1024, byte: int = 0xFF) -> bytes:
    """Return a small JPEG with `padding` fill (0xFF) or junk bytes before its first segment."""
    data = _jpeg(Image.new("RGB", (64, 48), (200, 10, 10)))
    return data[:2] + bytes([byte]) * padding + data[2:]


def many_segment_jpeg(segments: int = 5000) -> bytes:
    """Return a small JPEG whose header holds `segments` empty comments (4 bytes each)."""
    data = _jpeg(Image.new("RGB", (64, 48), (10, 200, 10)))
    return data[:2] + b"\xff\xfe\x00\x02" * segments + data[2:]


def exif_parts_jpeg(parts: int = 399) -> bytes:
    """Return a 64 x 64 JPEG whose header holds `parts` full EXIF segments (64 KB each).

    Pillow joins them into one, copying what it has each time: 26 MB of them cost each
    open seconds (a review, over uvicorn: every view of its page, every thumbnail).
    """
    data = _jpeg(Image.new("RGB", (64, 64), (30, 60, 90)))
    body = b"Exif\x00\x00II*\x00\x08\x00\x00\x00".ljust(65533, b"\x00")
    return data[:2] + (b"\xff\xe1\xff\xff" + body) * parts + data[2:]


def app1_trailer_jpeg(copies: int = 2_600_000) -> bytes:
    """Return an 8 x 8 JPEG followed by `copies` headers of empty EXIF segments (10 bytes each).

    Past the first scan, where the header checks do not look: 26 MB once cost the
    location stripping 9 to 13 s (a review, over uvicorn).
    """
    data = _jpeg(Image.new("RGB", (8, 8), (90, 60, 30)))
    return data + b"\xff\xe1\xff\xffExif\x00\x00" * copies


def progressive_jpeg(side: int = 6324, mode: str = "CMYK") -> bytes:
    """Return a small progressive JPEG whose frame says `side` x `side` pixels.

    Its scans hold a 64 x 64 picture: a decoder holds every coefficient of the frame it
    was told of. The review's 627 KB CMYK file of 6324 x 6324 took 462 MB to accept.
    """
    data = bytearray(_jpeg(Image.new(mode, (64, 64)), progressive=True))
    sof = data.index(b"\xff\xc2")
    struct.pack_into(">HH", data, sof + 5, side, side)  # marker, length, precision, then these
    return bytes(data)


def one_channel_scan_jpeg(side: int = 6324, frame: int = 0xC0) -> bytes:
    """Return a small sequential CMYK JPEG saying `side` x `side` whose first scan codes one
    channel of four: the decoder expects more scans, so it holds every coefficient.

    A review's 354-byte one took a web process from 72 to 532 MB, past the check that
    measured progressive frames only. `frame` is the start-of-frame marker to use.
    """
    out = bytearray(b"\xff\xd8")
    for marker, part in _segments(_jpeg(Image.new("CMYK", (16, 16)), quality=50)):
        if marker == 0xC0:
            part = bytearray(part)
            part[1] = frame
            struct.pack_into(">HH", part, 5, side, side)  # after the length and precision
        elif marker == 0xDA:  # keep the first channel of the scan's header, then its data
            (length,) = struct.unpack_from(">H", part, 2)
            channels = part[4]
            header = bytes([1]) + part[5:7] + part[5 + 2 * channels : 2 + length]
            part = b"\xff\xda" + struct.pack(">H", len(header) + 2) + header + part[2 + length :]
        out += part
    return bytes(out)


def multi_picture_jpeg(second: int = 32, repeat: int = 0) -> bytes:
    """Return a phone's multi-picture JPEG (MPO): a 64 x 48 photo, then a second picture.

    With `repeat`, the second is a progressive `second` x `second` picture whose last
    scan comes `repeat` times more: each a pass over it, the photo shown staying small.
    """
    first = Image.new("RGB", (64, 48), (30, 60, 90))
    other = Image.new("L", (second, second), 128)
    out = io.BytesIO()
    first.save(out, "MPO", save_all=True, append_images=[other], progressive=repeat > 0)
    data = out.getvalue()
    if repeat:
        last = data.rindex(b"\xff\xda")
        data = data[:-2] + data[last:-2] * repeat + b"\xff\xd9"
    return data


def png_chunk(kind: bytes, body: bytes = b"") -> bytes:
    """Return one PNG chunk: its length, type, data and CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def many_chunk_png(chunks: int, kind: bytes = b"abCd") -> bytes:
    """Return a small PNG with `chunks` empty ancillary chunks before its image data."""
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 10, 10)).save(out, "PNG")
    data = out.getvalue()
    header = 8 + 25  # the signature, then IHDR (its length, type, 13 bytes and CRC)
    return data[:header] + png_chunk(kind) * chunks + data[header:]


def split_idat_png(chunks: int, size: tuple[int, int] = (1200, 900)) -> bytes:
    """Return a noisy PNG with its image data split into `chunks` IDAT chunks (some encoders do)."""
    out = io.BytesIO()
    Image.effect_noise(size, 50).convert("RGB").save(out, "PNG")
    data = out.getvalue()
    pos, parts, idat = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        else:
            parts.append((kind, data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    step = -(-len(idat) // chunks)
    pieces = [png_chunk(b"IDAT", idat[i : i + step]) for i in range(0, len(idat), step)]
    head = b"".join(png_chunk(k, d) for k, d in parts if k != b"IEND")
    return data[:8] + head + b"".join(pieces) + png_chunk(b"IEND")


def many_chunk_webp(chunks: int) -> bytes:
    """Return a small lossless WebP followed by `chunks` empty chunks of an unknown type."""
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 10, 200)).save(out, "WEBP", lossless=True)
    riff = out.getvalue()[8:] + b"abcd\x00\x00\x00\x00" * chunks
    return b"RIFF" + struct.pack("<I", len(riff)) + riff


def flat_webp(side: int) -> bytes:
    """Return a lossless still WebP of `side` x `side` pixels of one colour: a few KB."""
    out = io.BytesIO()
    Image.new("RGB", (side, side), (10, 20, 30)).save(out, "WEBP", lossless=True)
    return out.getvalue()


def many_block_gif(blocks: int, *, extensions: bool = False, stray: bytes = b"") -> bytes:
    """Return a small GIF carrying `blocks` one-byte comment sub-blocks before its image.

    With `extensions`, each sub-block is a comment extension of its own. `stray` comes
    before them: bytes that start no block, which Pillow skips one by one.
    """
    out = io.BytesIO()
    Image.new("P", (64, 48), 3).save(out, "GIF")
    data = out.getvalue()
    screen = GIF_SCREEN + gif_colour_table_size(data[10])  # where the blocks start
    one_each = b"\x21\xfe\x01x\x00" * blocks  # introducer, label, one sub-block, the end
    one_comment = b"\x21\xfe" + b"\x01x" * blocks + b"\x00"
    blocks_of = one_each if extensions else one_comment
    return data[:screen] + stray + blocks_of + data[screen:]


def growing_gif(width: int = 4000, height: int = 4000, frames: int = 2) -> bytes:
    """Return a GIF whose screen is 1 x 1 and whose later frames are `width` x `height`.

    Pillow grows the canvas to a frame larger than the screen, so a size read when the
    file is opened says nothing of what the frames cost: 239 KB of 9000 x 9000 frames
    once took the web process from 83 MB to over 1 GB, stored as a 1 x 1 image. The
    frames are whole (Pillow's own encoding), so they decode without an error.
    """
    encoded = io.BytesIO()
    Image.new("P", (width, height), 0).save(encoded, "GIF")
    big = encoded.getvalue()
    start = GIF_SCREEN + gif_colour_table_size(big[10])
    while big[start] == 0x21:  # an extension: its label, then sub-blocks to an empty one
        start += 2
        while big[start]:
            start += 1 + big[start]
        start += 1
    assert big[start] == 0x2C, "Pillow's GIF has no image descriptor where expected"
    out = io.BytesIO()
    out.write(b"GIF89a")
    out.write(struct.pack("<HHBBB", 1, 1, 0x80, 0, 0))  # a 1 x 1 screen, 2-colour table
    out.write(b"\x00\x00\x00\xff\xff\xff")
    control = b"\x21\xf9\x04\x00\x00\x00\x00\x00"
    out.write(control + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x4c\x01\x00")
    for _ in range(frames - 1):
        out.write(control + big[start:-1])  # the whole frame, without the trailer
    out.write(b"\x3b")
    return out.getvalue()
