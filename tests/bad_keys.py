"""Object keys every storage backend must refuse (traversal, control characters, odd forms, too long)."""

BAD_KEYS = [
    "",
    "../escape.wav",
    "a/../../escape.wav",
    "a/..",
    "./a",
    "/etc/passwd",
    "//host/share",
    "a\\..\\..\\escape.wav",
    "C:\\windows",
    "a\x00b",
    "a\nb",
    "a\tb",
    "a\x7fb",
    "a\u2028b",
    "a//b",
    "a/",
    ".",
    "..",
    "x" * 256,
    "/".join(["abcdefgh"] * 120),  # 1079 bytes
]
