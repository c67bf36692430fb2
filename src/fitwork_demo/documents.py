"""Document images with known text: small pages rendered offline with Pillow's built-in font.

Each page is ``WIDTH`` x ``HEIGHT`` pixels (multiples of 32, so text detection takes it
as it is, without resizing), black text on white, ``3`` to ``LINES`` lines of one or two
words from ``VOCABULARY`` and, on about half the lines, a number.  The text of page ``n`` is
drawn from a generator seeded with ``(seed, n)``, so the same seed always gives the same
pages.  Words are drawn one by one, ``WORD_GAP`` font sizes apart: wide enough that the
detector boxes each word on its own, so spaces come from the layout of the boxes, not from
the recogniser (which often drops a narrow space).

`score` compares recognised lines with the known ones: a line counts when it matches
exactly (same characters, same single spaces), in the same place on the page.
"""

from __future__ import annotations

import io
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WIDTH = 448
HEIGHT = 256
FONT_SIZE = 24
LINES = 4
LINE_PITCH = 2.2
WORD_GAP = 1.6
VOCABULARY = (
    "account", "address", "amount", "balance", "bank", "customer", "date", "delivery", "due",
    "gross", "invoice", "item", "market", "net", "north", "number", "office", "order", "paid",
    "payment", "price", "quantity", "receipt", "reference", "river", "road", "shipping",
    "south", "station", "street", "tax", "total", "transfer", "unit",
)


@dataclass(frozen=True)
class Document:
    """One page: its id in the store, the lines written on it, and its PNG bytes."""

    id: str
    lines: tuple[str, ...]
    png: bytes


@dataclass(frozen=True)
class Score:
    """How much of the known text a run recognised exactly."""

    lines: int
    lines_exact: int
    documents: int
    documents_exact: int

    @property
    def line_accuracy(self) -> float:
        """Share of known lines recognised exactly."""
        return self.lines_exact / self.lines if self.lines else 0.0


def document_id(number: int) -> str:
    """The store id of page ``number``."""
    return f"doc-{number:05d}"


def page_text(number: int, seed: int) -> tuple[str, ...]:
    """The lines written on page ``number`` for ``seed``."""
    rng = random.Random(f"{seed}:{number}")
    lines = []
    for _ in range(rng.randint(3, LINES)):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.5:
            words.append(str(rng.randint(10, 9999)))
        lines.append(" ".join(words))
    return tuple(lines)


def render(lines: Sequence[str]) -> bytes:
    """A PNG page with ``lines`` written on it, top to bottom."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (WIDTH, HEIGHT), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=FONT_SIZE)
    y = float(FONT_SIZE)
    for line in lines:
        x = float(FONT_SIZE)
        for word in line.split(" "):
            draw.text((x, y), word, fill=(0, 0, 0), font=font)
            x += draw.textlength(word, font=font) + FONT_SIZE * WORD_GAP
        y += FONT_SIZE * LINE_PITCH
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def make_documents(count: int, seed: int = 0) -> list[Document]:
    """``count`` pages for ``seed``, numbered from 0."""
    documents = []
    for number in range(count):
        lines = page_text(number, seed)
        documents.append(Document(id=document_id(number), lines=lines, png=render(lines)))
    return documents


def score(known: Sequence[Document], recognised: Mapping[str, Sequence[str]]) -> Score:
    """Exact line matches of ``recognised`` (id -> lines) against the known pages."""
    lines = lines_exact = documents_exact = 0
    for document in known:
        got = list(recognised.get(document.id, ()))
        exact = sum(1 for i, line in enumerate(document.lines)
                    if i < len(got) and got[i] == line)
        lines += len(document.lines)
        lines_exact += exact
        documents_exact += exact == len(document.lines) == len(got)
    return Score(lines=lines, lines_exact=lines_exact, documents=len(known),
                 documents_exact=documents_exact)
