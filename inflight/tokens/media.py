"""What non-text content parts cost, in prompt tokens, without downloading anything.

Images follow OpenAI's published tile formula (platform.openai.com/docs/guides/images-vision,
"Calculating costs"): `low` detail is a flat 85 tokens; otherwise the image is scaled to fit
2048x2048, then its shorter side to 768, and costs 85 + 170 per 512-pixel tile. The size is only
known for data URLs (read from the image header); a remote URL is charged as a 1024x1024 image
(765 tokens), OpenAI's own example of a typical high-detail image.

Audio and files have no published formula for chat completions, so they are approximations,
chosen to over- rather than under-count: audio at 10 tokens a second of estimated duration, a
file at a token per 4 bytes of its content (like text), or 1,000 tokens when only an id is sent.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
UNKNOWN_IMAGE_TOKENS = 765
AUDIO_TOKENS_PER_SECOND = 10
AUDIO_BYTES_PER_SECOND = {"wav": 32_000, "mp3": 16_000}  # 16 kHz 16-bit mono; 128 kbit/s
FILE_BYTES_PER_TOKEN = 4
UNKNOWN_FILE_TOKENS = 1_000
HEADER_BYTES = 256 * 1024  # JPEG frame headers may follow an embedded EXIF thumbnail


def image_tokens(url: str, detail: str | None) -> int:
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = image_size(data_url_prefix(url, HEADER_BYTES)) if url.startswith("data:") else None
    if size is None:
        return UNKNOWN_IMAGE_TOKENS
    width, height = float(size[0]), float(size[1])
    if max(width, height) > 2048:
        scale = 2048 / max(width, height)
        width, height = width * scale, height * scale
    if min(width, height) > 768:
        scale = 768 / min(width, height)
        width, height = width * scale, height * scale
    tiles = math.ceil(width / 512) * math.ceil(height / 512)
    return LOW_DETAIL_TOKENS + TILE_TOKENS * tiles


def audio_tokens(data: str, audio_format: str | None) -> int:
    size = decoded_length(data)
    seconds = size / AUDIO_BYTES_PER_SECOND.get(audio_format or "", 16_000)
    return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)


def file_tokens(file: dict[str, object]) -> int:
    data = file.get("file_data")
    if isinstance(data, str) and data:
        payload = data.split(",", 1)[1] if data.startswith("data:") else data
        return math.ceil(decoded_length(payload) / FILE_BYTES_PER_TOKEN)
    return UNKNOWN_FILE_TOKENS


def decoded_length(b64: str) -> int:
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def data_url_prefix(url: str, limit: int) -> bytes:
    """The first `limit` decoded bytes of a base64 data URL (empty when it is not one)."""
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        return b""
    chunk = payload[: (limit // 3) * 4]
    try:
        return base64.b64decode(chunk + "=" * (-len(chunk) % 4))
    except (binascii.Error, ValueError):
        return b""


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header; None when it cannot be read."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            png_width, png_height = struct.unpack(">II", data[16:24])
            return int(png_width), int(png_height)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            gif_width, gif_height = struct.unpack("<HH", data[6:10])
            return int(gif_width), int(gif_height)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    offset = 2
    while offset + 9 < len(data):
        if data[offset] != 0xFF:
            return None
        marker = data[offset + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            offset += 2
            continue
        (length,) = struct.unpack(">H", data[offset + 2 : offset + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[offset + 5 : offset + 9])
            return width, height
        offset += 2 + length
    return None
