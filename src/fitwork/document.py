"""JSON documents fitwork writes and reads back: profiles, plans, decompositions, records."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel

from fitwork.errors import InputError


class Document(BaseModel):
    """A pydantic model saved as one JSON file; loading says plainly what went wrong."""

    document_kind: ClassVar[str] = "document"
    document_maker: ClassVar[str] = "fitwork"

    def save(self, path: str | Path) -> None:
        """Write this document as JSON, creating the folder if needed."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read and validate a document written by `save`."""
        kind = cls.document_kind
        try:
            return cls.model_validate_json(Path(path).read_text())
        except FileNotFoundError:
            raise InputError(f"{kind} {path}: no such file; make one with "
                             f"{cls.document_maker}") from None
        except ValueError as exc:
            first = " ".join(str(exc).splitlines()[1:3])
            raise InputError(f"{kind} {path}: not a fitwork {kind} ({first})") from None
