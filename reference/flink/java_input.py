"""`java.io.DataInputStream` over bytes: the big-endian integers, booleans and modified UTF-8 strings Flink writes,
bounded by the buffer so that a damaged or hostile length fails as a CheckpointFormatError naming the file."""

from __future__ import annotations

import struct

from statecert.spec.errors import CheckpointFormatError

_INT, _LONG, _SHORT = struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">h")
_DOUBLE, _FLOAT = struct.Struct(">d"), struct.Struct(">f")


class JavaDataInput:
    """Reads Java's `DataInput` encodings from `data`, starting at `position`; `path` names the file in errors."""

    def __init__(self, data: bytes, path: str, position: int = 0) -> None:
        self.data, self.path, self.position = data, path, position

    def fail(self, problem: str) -> CheckpointFormatError:
        return CheckpointFormatError(self.path, f"{problem} (at byte {self.position})")

    def read(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise self.fail(f"truncated: {size} bytes wanted, {len(self.data) - self.position} left")
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk

    def remaining(self) -> int:
        return len(self.data) - self.position

    def read_byte(self) -> int:
        """A signed byte."""
        value = self.read(1)[0]
        return value - 256 if value > 127 else value

    def read_unsigned_byte(self) -> int:
        return self.read(1)[0]

    def read_boolean(self) -> bool:
        value = self.read_unsigned_byte()
        if value > 1:
            raise self.fail(f"a boolean byte of {value}, not 0 or 1")
        return value == 1

    def read_short(self) -> int:
        return int(_SHORT.unpack(self.read(2))[0])

    def read_unsigned_short(self) -> int:
        return int.from_bytes(self.read(2), "big")

    def read_int(self) -> int:
        return int(_INT.unpack(self.read(4))[0])

    def read_long(self) -> int:
        return int(_LONG.unpack(self.read(8))[0])

    def read_double(self) -> float:
        return float(_DOUBLE.unpack(self.read(8))[0])

    def read_float(self) -> float:
        return float(_FLOAT.unpack(self.read(4))[0])

    def read_count(self, what: str, each: int = 1) -> int:
        """An int count of items of at least `each` bytes, refused when negative or more than the bytes left hold."""
        count = self.read_int()
        if count < 0 or count * each > self.remaining():
            raise self.fail(f"{what}: a count of {count} that the {self.remaining()} bytes left cannot hold")
        return count

    def read_utf(self) -> str:
        """Java's modified UTF-8 (`writeUTF`): an unsigned short length, NUL as two bytes, supplementary characters
        as surrogate pairs."""
        raw = self.read(self.read_unsigned_short())
        try:
            return (
                raw.replace(b"\xc0\x80", b"\x00")
                .decode("utf-8", "surrogatepass")
                .encode("utf-16", "surrogatepass")
                .decode("utf-16")
            )
        except UnicodeError as exc:
            raise self.fail(f"a string that is not modified UTF-8: {exc}") from None
