"""What a walk over a file keeps of it: its bytes, with some ranges replaced or dropped.

The location stripping (studio/metadata.py, studio/jpeg_places.py) walks a file's parts
in order and replaces some; everything else is copied byte for byte, once.
"""


class Splice:
    """What a walk keeps of `data`: its bytes from `start` on, with some ranges replaced."""

    def __init__(self, data: bytes, start: int = 0) -> None:
        self.data = data
        self.out = bytearray()
        self.copied = start  # data[start:copied] is dealt with: copied into `out`, or replaced
        self.replaced = False

    def replace(self, start: int, end: int, replacement: bytes = b"") -> None:
        """Put `replacement` (by default nothing: a drop) where `data[start:end]` was."""
        self.out += memoryview(self.data)[self.copied : start]  # one copy, not two
        self.out += replacement
        self.copied = end
        self.replaced = True

    def upto(self, end: int) -> bytearray:
        """Copy what is left of `data` up to `end`, and return what was kept."""
        self.out += memoryview(self.data)[self.copied : end]
        self.copied = max(self.copied, end)
        return self.out
