"""Held out: a deep pipeline of light stages.

Seven stages of string work at 0.05-0.3 ms each: what a cleaning pipeline written as many
small steps looks like, where moving an item between processes costs as much as a stage.
"""

from __future__ import annotations

import re
import unicodedata
import zlib

from bench_shape import Shape

from fitwork import Pipeline, unit

TAG = re.compile(r"<[^>]+>")
SPACE = re.compile(r"\s+")
WORDS = ("Café", "naïve", "<b>bold</b>", "résumé", "  spaced  ", "URL", "https://x.io/a",
         "déjà", "vu", "<i>it</i>", "coöperate", "Ünïcode", "plain", "text")


@unit
def raw(number: int) -> str:
    """A scraped snippet of 60 words with tags and odd spacing."""
    return " ".join(WORDS[(number * 31 + k * 7) % len(WORDS)] for k in range(60))


@unit
def untag(text: str) -> str:
    """Markup removed."""
    return TAG.sub("", text)


@unit
def normalise(text: str) -> str:
    """NFKD, accents dropped."""
    folded = unicodedata.normalize("NFKD", text)
    return "".join(c for c in folded if not unicodedata.combining(c))


@unit
def squeeze(text: str) -> str:
    """Runs of spaces as one, lower case."""
    return SPACE.sub(" ", text).strip().lower()


@unit
def tokens(text: str) -> list[str]:
    """Words, URLs dropped."""
    return [w for w in text.split(" ") if not w.startswith("http")]


@unit
def shingles(words: list[str]) -> list[int]:
    """CRC-32 hashes of 3-word shingles."""
    return [zlib.crc32(" ".join(words[i:i + 3]).encode()) for i in range(len(words) - 2)]


@unit
def sketch(hashes: list[int]) -> float:
    """The mean of the 8 smallest shingle hashes, scaled to [0, 1) (a MinHash-style sketch)."""
    return sum(sorted(hashes)[:8]) / 8 / 2**32


SHAPE = Shape(Pipeline(raw, untag, normalise, squeeze, tokens, shingles, sketch,
                       name="deep_light"),
              "seven light stages of string work (0.05-0.3 ms each)", 20000,
              (1, 2, 3, 4), {"raw": (1,), "untag": (1,), "normalise": (1, 2), "squeeze": (1,),
                             "tokens": (1,), "shingles": (1,), "sketch": (1,)})
