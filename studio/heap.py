"""Give a decoded image's memory back to the system when it is freed, not keep it for later.

glibc serves a large allocation from a mapping of its own (returned to the system when
freed) only above a threshold, which it raises to the size of each such block freed, up
to 32 MB: after the first large image, every decode's pixels (Pillow asks for them in
blocks of up to 16 MB) come from the heaps, one per thread, and stay there once freed.
Measured in a web process drawing twelve thumbnails of a 40-megapixel image at once (two
decodes at a time): 864 MB above its start at the peak and 552 MB kept afterwards; with
the threshold fixed at 1 MB, 527 MB (two decodes' worth) and 12 MB. Pillow is then let
keep a few freed blocks of pixels to reuse (PILLOW_BLOCKS, 16 MB each): without them every
decode faulted its pixels in afresh, and a 24-megapixel upload over uvicorn took 1.75
times its in-process floor instead of 1.5 (`make bench`). Called once, at start, by the
processes that decode images: the studio (avatars/asgi.py) and the worker.
"""

import ctypes
import ctypes.util
import logging

from PIL import Image

log = logging.getLogger("studio")

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)
MMAP_THRESHOLD = 1024 * 1024  # bytes: larger blocks get mappings of their own
PILLOW_BLOCKS = 8  # freed blocks of pixels Pillow keeps to reuse: at most 128 MB


def give_back_large_blocks() -> bool:
    """Fix glibc's threshold for mapped blocks and let Pillow keep PILLOW_BLOCKS freed
    blocks; say whether the threshold took (False off glibc)."""
    Image.core.set_blocks_max(PILLOW_BLOCKS)
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.info("no glibc mallopt here; large blocks are kept as the allocator sees fit")
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
