"""A document's text for the model: PDFs through pypdf, text files (notes, code, logs, CSV) decoded whatever
their encoding; for anything else, a clear reason why there is no text.

Every outcome is an :class:`Extracted`: the text (empty when there is none) and, when there is none,
``problem`` in words for the person who sent it — a password-protected PDF, a corrupt one, a scanned
one without a text layer, a type that cannot be read here. Nothing here raises for bad input.

Parsing is CPU work on untrusted bytes (a 20 MB PDF takes seconds), so callers run
:func:`extract_document` in a thread (:func:`read_document` does).
"""

from __future__ import annotations

import asyncio
import codecs
import io
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath

from charset_normalizer import from_bytes
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError

log = logging.getLogger(__name__)

PDF_MIME = "application/pdf"
#: Mime types that are text though not ``text/*``.
TEXT_MIMES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/sql",
        "application/x-sh",
        "application/x-python",
        "application/x-python-code",
        "application/csv",
        "application/x-ndjson",
        "application/ld+json",
        "application/xhtml+xml",
        "application/x-subrip",
        "application/x-tex",
    }
)
#: File name endings read as text whatever mime the platform reports (Telegram often says octet-stream).
TEXT_SUFFIXES = frozenset(
    {
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".csv",
        ".tsv",
        ".log",
        ".json",
        ".jsonl",
        ".ndjson",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".env",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".svg",
        ".srt",
        ".vtt",
        ".tex",
        ".sql",
        ".sh",
        ".bash",
        ".zsh",
        ".fish",
        ".ps1",
        ".bat",
        ".py",
        ".pyi",
        ".ipynb",
        ".js",
        ".mjs",
        ".cjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".kt",
        ".kts",
        ".scala",
        ".go",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".pl",
        ".lua",
        ".swift",
        ".m",
        ".r",
        ".jl",
        ".hs",
        ".ex",
        ".exs",
        ".erl",
        ".clj",
        ".dart",
        ".vue",
        ".svelte",
        ".gradle",
        ".properties",
        ".diff",
        ".patch",
        ".dockerfile",
        ".makefile",
        ".proto",
        ".graphql",
    }
)
#: How much of an unlabelled file is looked at to tell text from binary.
_SNIFF_BYTES = 8192
_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(frozen=True)
class Extracted:
    """A document's text (``""`` when there is none, and then ``problem`` says why); ``pages`` for PDFs."""

    text: str = ""
    pages: int = 0
    problem: str = ""
    encoding: str = ""


async def read_document(data: bytes, *, name: str, mime: str) -> Extracted:
    """:func:`extract_document` in a thread, so the event loop is not held while a PDF is parsed."""
    return await asyncio.to_thread(extract_document, data, name=name, mime=mime)


def extract_document(data: bytes, *, name: str, mime: str) -> Extracted:
    """The text of the document ``data`` (named ``name``, of type ``mime`` as the platform said)."""
    kind = document_kind(data, name=name, mime=mime)
    if kind == "pdf":
        return pdf_text(data)
    if kind == "text":
        return decoded_text(data)
    described = mime or (PurePosixPath(name).suffix.lower() if name else "") or "unknown type"
    return Extracted(problem=f"cannot read this type ({described}); send it as PDF or a text file")


def document_kind(data: bytes, *, name: str, mime: str) -> str:
    """``"pdf"``, ``"text"`` or ``"binary"``: by the bytes' own signature, then the mime, then the name's ending;
    an unlabelled file (no or a generic mime, an unknown ending) is text when its start decodes as text."""
    mime = mime.split(";", 1)[0].strip().lower()
    suffix = PurePosixPath(name).suffix.lower()
    if data.startswith(b"%PDF-") or mime == PDF_MIME or suffix == ".pdf":
        return "pdf"
    if mime.startswith("text/") or mime in TEXT_MIMES or suffix in TEXT_SUFFIXES:
        return "text"
    if mime in ("", "application/octet-stream") and _looks_like_text(data[:_SNIFF_BYTES]):
        return "text"
    return "binary"


def _looks_like_text(head: bytes) -> bool:
    if head.startswith(_BOMS):
        return True
    if not head or b"\x00" in head:
        return False
    return from_bytes(head).best() is not None


def decoded_text(data: bytes) -> Extracted:
    """Text in whatever encoding it came: UTF-8 (with or without its BOM) directly, anything else (UTF-16 with a
    BOM, cp1251, Latin-1, ...) as charset-normalizer finds it."""
    if data.startswith(codecs.BOM_UTF8):
        return Extracted(text=data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace"), encoding="utf_8")
    try:
        return Extracted(text=data.decode("utf-8"), encoding="utf_8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        return Extracted(problem="cannot read this file as text (not in any text encoding)")
    return Extracted(text=str(best), encoding=best.encoding)


def pdf_text(data: bytes) -> Extracted:
    """The text layer of each page, headed ``[page N]`` when there are several."""
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not _opened(reader):
            return Extracted(problem="the PDF is password-protected")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except FileNotDecryptedError:
        return Extracted(problem="the PDF is password-protected")
    except Exception as error:
        log.info("unreadable PDF: %s: %s", type(error).__name__, error)
        return Extracted(problem=f"corrupt PDF ({_short(error)})")
    if not pages:
        return Extracted(problem="the PDF has no pages")
    if not any(pages):
        return Extracted(pages=len(pages), problem="no text layer (a scanned PDF?), so its text cannot be read")
    if len(pages) == 1:
        return Extracted(text=pages[0], pages=1)
    text = "\n\n".join(f"[page {number}]\n{page}" for number, page in enumerate(pages, 1) if page)
    return Extracted(text=text, pages=len(pages))


def _opened(reader: PdfReader) -> bool:
    """Many PDFs are encrypted with an empty password (only to restrict printing or copying): open those."""
    try:
        return reader.decrypt("") != PasswordType.NOT_DECRYPTED
    except (DependencyError, NotImplementedError):
        return False


def _short(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text if len(text) <= 120 else text[:117] + "..."
