"""JSON documents fitwork writes and reads back: profiles, plans, decompositions, records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ValidationError

from fitwork.errors import InputError
from fitwork.version import __version__


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
        """Read and validate a document written by `save`.

        Every failure is one `InputError` line naming the file, what is wrong with it, and
        how to get a good one: a missing, unreadable, truncated, corrupted or foreign file,
        or one written by a fitwork version whose format this one no longer reads.
        """
        kind, place = cls.document_kind, f"{cls.document_kind} {path}"
        remake = f"make it again with {cls.document_maker}"
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            raise InputError(f"{place}: no such file; make one with {cls.document_maker}"
                             ) from None
        except IsADirectoryError:
            raise InputError(f"{place}: is a directory; give the {kind} file's path") from None
        except OSError as exc:
            reason = (exc.strerror or type(exc).__name__).lower()
            raise InputError(f"{place}: cannot read ({reason}); check the path and its "
                             "permissions") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{place}: not a fitwork {kind} (byte {exc.start + 1} is not "
                             f"UTF-8 text; the file is corrupted); {remake}") from None
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problem = _first_problem(exc)
        except (ValueError, RecursionError) as exc:
            problem = " ".join(str(exc).split())[:200] or type(exc).__name__
        written_by = _version_in(text)
        if written_by is not None and written_by != __version__:
            raise InputError(f"{place}: written by fitwork {written_by}, whose {kind} format "
                             f"this fitwork {__version__} does not read ({problem}); "
                             f"{remake}") from None
        raise InputError(f"{place}: not a fitwork {kind} ({problem}); {remake}") from None


def _first_problem(exc: ValidationError) -> str:
    """The first thing pydantic found wrong, on one short line: ``field.path: message``."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = " ".join(str(first.get("msg", "invalid")).split())[:200]
    more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def _version_in(text: str) -> str | None:
    """The ``fitwork_version`` a JSON object says wrote it, if it parses and says so."""
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):
        return None
    version = data.get("fitwork_version") if isinstance(data, dict) else None
    return version if isinstance(version, str) and len(version) <= 40 else None
