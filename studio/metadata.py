"""Strip location data from uploaded photos, losslessly: the pixels are never re-encoded.

A phone photo carries where it was taken in its EXIF GPS directory and often again in an
XMP packet. Reference photos are shown to everyone in the studio and sent to Ember, so
uploads lose both before they are hashed and stored:

- EXIF (JPEG APP1, PNG eXIf, WebP EXIF): the GPS directory is emptied in place (its
  entries and their data zeroed, its count set to 0), so every other offset in the block
  stays valid and orientation, camera and date survive;
- XMP (JPEG APP1, PNG iTXt, WebP `XMP ` chunk): the packet is dropped whole.

Compressed image data is copied byte for byte. GIF carries neither.
"""

import struct
import zlib

GPS_IFD_TAG = 0x8825
# TIFF field type -> bytes per value (the types EXIF uses).
TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8}
EXIF_HEADER = b"Exif\x00\x00"
XMP_JPEG = b"http://ns.adobe.com/xap/1.0/\x00"
XMP_PNG_KEYWORD = b"XML:com.adobe.xmp\x00"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def strip_location(data: bytes) -> bytes:
    """Return `data` without location metadata; bytes of other kinds are returned as they are."""
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data.startswith(PNG_SIGNATURE):
        return _png(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    return data


def empty_gps(tiff: bytearray, start: int = 0) -> bool:
    """Empty the GPS directory of the TIFF block at `tiff[start:]` in place; True if there was one.

    A block too broken to walk is left as it is: the pixels do not depend on it.
    """
    try:
        return _empty_gps(tiff, start)
    except (struct.error, IndexError, ValueError):
        return False


def _empty_gps(tiff: bytearray, start: int) -> bool:
    order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[start : start + 2]))
    if order is None:
        return False
    (ifd0,) = struct.unpack_from(order + "I", tiff, start + 4)
    gps = _find_entry(tiff, start, start + ifd0, order, GPS_IFD_TAG)
    if gps is None:
        return False
    directory = start + gps
    (count,) = struct.unpack_from(order + "H", tiff, directory)
    for index in range(count):
        entry = directory + 2 + 12 * index
        _tag, kind, n, offset = struct.unpack_from(order + "HHII", tiff, entry)
        size = TYPE_SIZES.get(kind, 1) * n
        if size > 4 and start + offset + size <= len(tiff):
            tiff[start + offset : start + offset + size] = bytes(size)
        tiff[entry : entry + 12] = bytes(12)
    struct.pack_into(order + "H", tiff, directory, 0)
    return True


def _find_entry(tiff: bytearray, start: int, ifd: int, order: str, tag: int) -> int | None:
    """Return the value (an offset) of `tag` in the directory at `ifd`, if present."""
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    for index in range(count):
        entry_tag, _kind, _n, value = struct.unpack_from(order + "HHII", tiff, ifd + 2 + 12 * index)
        if entry_tag == tag:
            return int(value)
    return None


# --- containers ------------------------------------------------------------------------


def _jpeg(data: bytes) -> bytes:
    out = bytearray(data[:2])
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            out.append(0xFF)
            pos += 1
            continue
        if marker == 0xDA or marker == 0xD9:  # start of scan, or the end: copy the rest
            break
        (length,) = struct.unpack_from(">H", data, pos + 2)
        segment = bytearray(data[pos : pos + 2 + length])
        body = segment[4:]
        if marker == 0xE1 and body.startswith(XMP_JPEG):
            pos += 2 + length
            continue  # the XMP packet may repeat the location: drop it
        if marker == 0xE1 and body.startswith(EXIF_HEADER):
            empty_gps(segment, 4 + len(EXIF_HEADER))
        out += segment
        pos += 2 + length
    out += data[pos:]
    return bytes(out)


def _png(data: bytes) -> bytes:
    out = bytearray(PNG_SIGNATURE)
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        body = bytearray(data[pos + 8 : pos + 8 + length])
        end = pos + 12 + length
        if kind == b"iTXt" and body.startswith(XMP_PNG_KEYWORD):
            pos = end
            continue
        if kind == b"eXIf" and empty_gps(body):
            crc = zlib.crc32(kind + body)
            out += struct.pack(">I", length) + kind + body + struct.pack(">I", crc)
        else:
            out += data[pos:end]
        pos = end
        if kind == b"IEND":
            break
    out += data[pos:]
    return bytes(out)


def _webp(data: bytes) -> bytes:
    chunks = bytearray()
    pos = 12
    dropped_xmp = False
    while pos + 8 <= len(data):
        kind = data[pos : pos + 4]
        (length,) = struct.unpack_from("<I", data, pos + 4)
        end = pos + 8 + length + (length & 1)  # chunks are padded to an even size
        if kind == b"XMP ":
            dropped_xmp = True
            pos = end
            continue
        chunk = bytearray(data[pos:end])
        if kind == b"EXIF":
            skip = 8 + (len(EXIF_HEADER) if chunk[8:].startswith(EXIF_HEADER) else 0)
            empty_gps(chunk, skip)
        chunks += chunk
        pos = end
    if dropped_xmp and chunks[:4] == b"VP8X":
        chunks[8] &= ~0x04 & 0xFF  # the "has XMP" flag
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + bytes(chunks)
